// The dashboard's page: polls /api/state and shows it; every action is a POST the controller relays
// to the provider, as `mesh tool` does. Everything shown is put in with textContent, never as HTML.
// It logs in with the one-time code of `mesh dashboard`'s link (?code=…): the controller sets an
// HttpOnly session cookie and gives a CSRF token, which this page keeps in its origin's storage and
// sends with every request (the cookie alone opens nothing).
// @ts-check
"use strict";

(() => {
  const POLL_MS = 2000;
  const SESSION_KEY = "mesh-dashboard-session";
  const CSRF_HEADER = "x-mesh-csrf";
  // A consumer's states on the page and their words: the keys are ConsumerViewState
  // (src/dashboard/dashboard-state.ts), which test/dashboard-states.test.ts holds them to.
  const STATES = {
    active: "active",
    failing: "failing",
    unasked: "no longer asked",
    "awaiting-approval": "waiting for approval",
    retired: "retired",
    deleted: "deleted",
    unknown: "unknown",
  };

  let state = null;
  let ledger = { module: null, reply: null };
  let fleetHistory = null;
  let showReads = false;
  let deleting = null;
  let timer = null;

  const $ = (id) => document.getElementById(id);
  const $input = (id) => /** @type {HTMLInputElement} */ ($(id));
  const $button = (id) => /** @type {HTMLButtonElement} */ ($(id));
  const $dialog = (id) => /** @type {HTMLDialogElement} */ ($(id));
  /** What a failure says, whatever was thrown. */
  const messageOf = (err) => (err instanceof Error ? err.message : String(err));
  /** Whether a failure is the session having ended (the login form is already shown). */
  const isLoggedOut = (err) =>
    err instanceof Error && /** @type {{ loggedOut?: boolean }} */ (err).loggedOut === true;

  /** An element with attributes and children; strings become text nodes, never markup. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs ?? {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(typeof child === "string" || typeof child === "number" ? String(child) : child);
    }
    return node;
  }

  function ago(iso) {
    const at = Date.parse(iso ?? "");
    if (Number.isNaN(at)) return "";
    const s = Math.max(0, Math.round((Date.now() - at) / 1000));
    if (s < 5) return "just now";
    if (s < 90) return `${s} s ago`;
    if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
    if (s < 36 * 3600) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} days ago`;
  }

  function when(iso) {
    if (!iso) return el("span", { class: "muted" }, "—");
    return el("time", { datetime: iso, title: iso }, ago(iso));
  }

  /** A link to where a provider serves its metrics; only an http(s) URL (the server checked it first). */
  function metricsLink(url) {
    if (typeof url !== "string" || !/^https?:\/\//i.test(url)) return el("span", { class: "muted" }, "—");
    return el(
      "a",
      { class: "metrics", href: url, rel: "noopener noreferrer", title: "Prometheus metrics" },
      url.replace(/^https?:\/\//i, ""),
    );
  }

  function badge(kind, text) {
    return el("span", { class: `badge ${kind}` }, text);
  }

  function table(headers, rows, empty) {
    if (rows.length === 0) return el("p", { class: "muted" }, empty);
    return el(
      "div",
      { class: "table" },
      el(
        "table",
        {},
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            headers.map((h) => el("th", { scope: "col" }, h)),
          ),
        ),
        el(
          "tbody",
          {},
          rows.map((cells) =>
            el(
              "tr",
              {},
              cells.map((c, i) => el("td", { "data-label": headers[i] }, c)),
            ),
          ),
        ),
      ),
    );
  }

  // ---- talking to the controller

  /** The session this page holds: `{csrf, who, expiresAt}`, or null. */
  function session() {
    try {
      const kept = JSON.parse(localStorage.getItem(SESSION_KEY) ?? "null");
      return kept && typeof kept.csrf === "string" ? kept : null;
    } catch {
      return null;
    }
  }

  function forgetSession() {
    localStorage.removeItem(SESSION_KEY);
  }

  async function api(path, body) {
    const headers = { accept: "application/json" };
    const held = session();
    if (held) headers[CSRF_HEADER] = held.csrf;
    const init =
      body === undefined
        ? { headers }
        : {
            method: "POST",
            headers: { ...headers, "content-type": "application/json" },
            body: JSON.stringify(body),
          };
    const res = await fetch(path, { ...init, credentials: "same-origin", cache: "no-store" });
    let answer;
    try {
      answer = await res.json();
    } catch {
      throw new Error(`the controller answered ${res.status} without JSON`);
    }
    if (res.status === 401 || (res.status === 403 && answer.code === "csrf")) {
      forgetSession();
      askToLogIn(held !== null ? "the session has ended (it expired, or the controller restarted)" : "");
      const err = Object.assign(new Error("not logged in"), { loggedOut: true });
      throw err;
    }
    return answer;
  }

  function askToLogIn(why) {
    stop();
    $("login-form").hidden = false;
    $("view").hidden = true;
    $("who").hidden = true;
    $("summary").textContent = "log in with the link mesh dashboard prints";
    $("summary").className = "";
    $("login-error").textContent = why;
    $("login-error").hidden = !why;
    $("code-input").focus();
  }

  /** Trades a one-time code for a session; true when logged in. */
  async function logIn(code) {
    let res;
    try {
      res = await fetch("/api/login", {
        method: "POST",
        headers: { accept: "application/json", "content-type": "application/json" },
        body: JSON.stringify({ code }),
        credentials: "same-origin",
        cache: "no-store",
      });
    } catch (err) {
      askToLogIn(`the controller does not answer: ${messageOf(err)}`);
      return false;
    }
    const answer = await res.json().catch(() => ({}));
    if (!res.ok || typeof answer.csrf !== "string") {
      askToLogIn(answer.error ?? `the controller answered ${res.status}`);
      return false;
    }
    localStorage.setItem(
      SESSION_KEY,
      JSON.stringify({ csrf: answer.csrf, who: answer.who, expiresAt: answer.expiresAt }),
    );
    return true;
  }

  function showLoggedIn() {
    const held = session();
    $("login-form").hidden = true;
    $("view").hidden = false;
    $("who").hidden = held === null;
    $("who-name").textContent = held?.who ?? "";
  }

  async function logOut() {
    await api("/api/logout", {}).catch(() => undefined);
    forgetSession();
    state = null;
    $("view").replaceChildren();
    askToLogIn("");
  }

  function notice(text, kind) {
    const n = $("notice");
    n.textContent = text;
    n.className = kind ?? "";
    n.hidden = !text;
  }

  async function refresh() {
    try {
      state = await api("/api/state");
      const view = currentView();
      if (view.name === "overview") fleetHistory = await api("/api/fleet-history").catch(() => null);
      if (view.name === "ledger") {
        const module = view.arg ?? ledger.module ?? state.modules[0]?.name ?? null;
        if (module)
          ledger = { module, reply: await api(`/api/ledger?module=${encodeURIComponent(module)}&limit=200`) };
      }
      render();
    } catch (err) {
      if (isLoggedOut(err)) return;
      $("summary").textContent = `the controller does not answer: ${messageOf(err)}`;
      $("summary").className = "error";
    }
  }

  function start() {
    stop();
    if (session() === null) {
      askToLogIn("");
      return;
    }
    showLoggedIn();
    void refresh();
    timer = setInterval(() => void refresh(), POLL_MS);
  }

  function stop() {
    if (timer !== null) clearInterval(timer);
    timer = null;
  }

  // ---- views

  function currentView() {
    const [name, ...rest] = location.hash.replace(/^#/, "").split("/");
    const arg = rest.length > 0 ? decodeURIComponent(rest.join("/")) : null;
    return {
      name: ["overview", "providers", "provider", "approvals", "ledger"].includes(name) ? name : "overview",
      arg,
    };
  }

  function render() {
    if (state === null) return;
    const view = currentView();
    const summary = $("summary");
    const silent = state.nodes.filter((n) => !n.connected).length;
    const misbehaving = state.misbehaving ?? 0;
    summary.className =
      state.failing > 0 || state.waiting > 0 || silent > 0 || misbehaving > 0 ? "attention" : "";
    summary.textContent =
      `${state.nodes.length} node(s)${silent > 0 ? `, ${silent} not connected` : ""} · ` +
      `${state.modules.length} module(s)${misbehaving > 0 ? `, ${misbehaving} misbehaving` : ""} · ` +
      `${state.failing} failing · ${state.waiting} waiting for approval · ` +
      `updated ${new Date(state.at).toLocaleTimeString()}`;
    $("approvals-count").textContent = state.waiting > 0 ? `(${state.waiting})` : "";
    for (const a of /** @type {NodeListOf<HTMLAnchorElement>} */ (document.querySelectorAll("nav a"))) {
      const active =
        a.dataset.view === view.name || (a.dataset.view === "providers" && view.name === "provider");
      if (active) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    const main = $("view");
    const content =
      view.name === "provider"
        ? providerView(view.arg)
        : view.name === "providers"
          ? providersView()
          : view.name === "approvals"
            ? approvalsView()
            : view.name === "ledger"
              ? ledgerView()
              : [...overview(), historySection()];
    main.replaceChildren(...content.filter((node) => node !== null && node !== undefined));
    main.dataset.view = view.name;
  }

  // The fleet's newest kept revisions: who applied each, when, through what, and what it changed.
  function historySection() {
    if (fleetHistory === null || !Array.isArray(fleetHistory.history)) return null;
    return el(
      "section",
      { id: "fleet-history" },
      el("h2", {}, `Fleet revisions (serving ${fleetHistory.revision})`),
      table(
        ["Revision", "Applied", "By", "Via", "What changed"],
        fleetHistory.history
          .slice(0, 10)
          .map((h) => [
            String(h.revision),
            when(h.at),
            h.who,
            h.via,
            el("span", { class: "wrap" }, h.summary),
          ]),
        "No revision applied yet: mesh apply FILE stores the first.",
      ),
    );
  }

  /** Every consumer of every provider, with its provider's name. */
  function allConsumers() {
    return state.providers.flatMap((p) => p.consumers.map((c) => ({ ...c, provider: p.module })));
  }

  /**
   * The first page's story: which consumers fail and why, which were never seen connected, the
   * retirements waiting for a person, and what people asked lately, with who. A section of its own
   * per part, so another part adds as one more entry of the list.
   */
  function story() {
    const consumers = allConsumers();
    const failing = consumers.filter((c) => c.state === "failing");
    const never = consumers.filter((c) => c.neverSeenConnected === true && c.state !== "failing");
    const waiting = state.providers.filter((p) => p.waiting !== null);
    const actions = state.actions ?? [];
    const name = (c) => (c.consumer ? `${c.consumer} (${c.login})` : c.login);
    return [
      el(
        "section",
        { id: "story-failing", class: failing.length > 0 ? "warning" : "" },
        el("h2", {}, failing.length > 0 ? `Failing: ${failing.length}` : "Failing: none"),
        failing.length > 0
          ? table(
              ["Consumer", "Provider", "Why", "Since"],
              failing.map((c) => [
                name(c),
                el("a", { href: `#provider/${encodeURIComponent(c.provider)}` }, c.provider),
                el("span", { class: "wrap" }, c.why),
                when(c.since),
              ]),
              "",
            )
          : el("p", {}, "Every provider serves its consumers (as each provider's own status says)."),
      ),
      never.length > 0
        ? el(
            "section",
            { id: "story-never-connected", class: "warning" },
            el("h2", {}, `Never seen connected: ${never.length}`),
            el(
              "p",
              {},
              "Their provider has not seen them log in since their login was made or rotated: an app pointed elsewhere, misconfigured, or not started.",
            ),
            table(
              ["Consumer", "Provider", "Since"],
              never.map((c) => [name(c), c.provider, when(c.unusedSince ?? c.since)]),
              "",
            ),
          )
        : null,
      waiting.length > 0
        ? el(
            "section",
            { id: "story-waiting", class: "warning" },
            el("h2", {}, `Retirements waiting for a person: ${waiting.length}`),
            table(
              ["Provider", "Logins", "Why"],
              waiting.map((p) => [
                el("a", { href: "#approvals" }, p.module),
                el("span", { class: "wrap" }, p.waiting.logins.join(", ")),
                el("span", { class: "wrap" }, p.waiting.reason),
              ]),
              "",
            ),
          )
        : null,
      el(
        "section",
        { id: "story-actions" },
        el("h2", {}, "Recent operator actions"),
        table(
          ["When", "Who", "Through", "Module", "What"],
          actions.map((a) => [
            when(a.at),
            a.who,
            a.via,
            a.module,
            el(
              "span",
              { class: "wrap" },
              a.what,
              a.ok === false ? el("span", {}, " ", badge("failing", "failed")) : null,
            ),
          ]),
          "Nobody has asked anything of a provider through the mesh yet.",
        ),
      ),
    ];
  }

  function overview() {
    const refused = state.fleet.refused;
    return [
      ...story(),
      refused
        ? el(
            "section",
            { class: "warning" },
            el("h2", {}, "The fleet file was refused"),
            el("p", {}, "The last good fleet is still served. Fix what follows and save it again:"),
            el(
              "ul",
              {},
              refused.map((r) => el("li", {}, r)),
            ),
          )
        : null,
      el(
        "section",
        { id: "nodes" },
        el("h2", {}, "Nodes and their agents"),
        table(
          ["Node", "Agent", "Last report", "Generation", "Modules"],
          state.nodes.map((n) => [
            n.name,
            !n.enrolled
              ? badge("unknown", "not enrolled")
              : n.connected
                ? badge("active", "connected")
                : badge("failing", "not reporting"),
            when(n.lastReportAt),
            n.generation === null ? "—" : String(n.generation),
            el("span", { class: "wrap" }, n.modules.join(", ") || "—"),
          ]),
          "The fleet names no nodes.",
        ),
      ),
      el(
        "section",
        { id: "modules" },
        el("h2", {}, "Modules"),
        table(
          ["Module", "Node", "State", "Restarts", "Provides"],
          state.modules.map((m) => [
            m.provides.length > 0
              ? el("a", { href: `#provider/${encodeURIComponent(m.name)}` }, m.name)
              : m.name,
            m.node,
            moduleState(m, credentialsFailing(m.name)),
            String(m.restarts),
            m.provides.join(", ") || "—",
          ]),
          "The fleet names no modules.",
        ),
      ),
      ...providersView(),
    ];
  }

  /** The interfaces of consumer `module` whose credential its provider fails to serve. */
  function credentialsFailing(module) {
    return allConsumers()
      .filter((c) => c.consumer === module && c.state === "failing")
      .map((c) => c.interface);
  }

  /**
   * A module's state, and each way it misbehaves (what it was asked, what was wrong, since when). A
   * running app whose credential fails is not green: it runs, and cannot use what it needs.
   */
  function moduleState(m, failingCredentials = []) {
    const state =
      m.state === "running" && failingCredentials.length > 0
        ? badge("failing", `running, ${failingCredentials.join(", ")} failing`)
        : badge(m.state === "running" ? "active" : m.state === "crashing" ? "failing" : "unknown", m.state);
    const bad = m.misbehaving ?? [];
    if (bad.length === 0) return state;
    return el(
      "span",
      { class: "badges" },
      state,
      bad.map((b) =>
        el(
          "span",
          {
            class: "badge failing misbehaving",
            title: `its answer to ${b.answer} was not used since ${b.since}: ${b.what}`,
          },
          `misbehaving (${b.answer}: ${b.fault})`,
        ),
      ),
    );
  }

  function counts(p) {
    const by = {};
    for (const c of p.consumers) by[c.state] = (by[c.state] ?? 0) + 1;
    return Object.entries(by).map(([s, n]) => badge(s, `${n} ${STATES[s] ?? s}`));
  }

  function providersView() {
    return [
      el(
        "section",
        { id: "providers" },
        el("h2", {}, "Providers"),
        table(
          ["Provider", "Node", "Interfaces", "Consumers", "Answers", "Metrics"],
          state.providers.map((p) => [
            el("a", { href: `#provider/${encodeURIComponent(p.module)}` }, p.module),
            p.node,
            p.interfaces.join(", "),
            el("span", { class: "badges" }, counts(p)),
            p.answered ? badge("active", "answers") : badge("failing", "does not answer"),
            metricsLink(p.metrics),
          ]),
          "No module of the fleet provides an interface.",
        ),
      ),
    ];
  }

  function waitingBlock(p) {
    const w = p.waiting;
    return el(
      "div",
      { class: "waiting", "data-provider": p.module, "data-set": w.id },
      el(
        "p",
        {},
        el("strong", {}, `${p.module}: `),
        `${w.logins.length} consumer(s) wait to be retired — ${w.reason}.`,
      ),
      el(
        "ul",
        { class: "logins" },
        w.logins.map((l) => el("li", {}, el("code", {}, l))),
      ),
      el(
        "button",
        {
          class: "approve",
          type: "button",
          onclick: (e) => approve(p.module, w, e.currentTarget),
        },
        `Approve retiring ${w.logins.length}`,
      ),
    );
  }

  function providerView(module) {
    const p = state.providers.find((x) => x.module === module);
    if (!p)
      return [el("p", { class: "error" }, `${module ?? "?"} is not a provider of the fleet being served.`)];
    return [
      el(
        "section",
        { id: "provider", "data-provider": p.module },
        el(
          "h2",
          {},
          `${p.module}`,
          el("span", { class: "muted" }, ` on ${p.node} · ${p.interfaces.join(", ")}`),
        ),
        p.answered
          ? el("p", { class: "muted" }, "Last pass ", when(p.lastPassAt), " · asked ", when(p.askedAt))
          : el(
              "p",
              { class: "error provider-problem" },
              `It does not answer: ${p.problem ?? "no reason given"}. Consumers are shown as the fleet and the standings say.`,
            ),
        p.metrics
          ? el("p", { class: "muted provider-metrics" }, "Prometheus metrics: ", metricsLink(p.metrics))
          : null,
        p.contributionsProblem ? el("p", { class: "warning" }, p.contributionsProblem) : null,
        ...(p.endpoints ?? [])
          .filter((e) => e.disagrees)
          .map((e) =>
            el(
              "p",
              { class: "warning endpoint-disagrees" },
              `Its ${e.interface} consumers are sent to ${e.given} (the fleet's endpoint:), while it serves at ` +
                `${e.serves ?? "?"} (its admin URL, where it makes their logins).`,
            ),
          ),
        p.waiting ? waitingBlock(p) : null,
        el("h3", {}, "Consumers"),
        table(
          ["Login", "Consumer", "Node", "State", "Since", "Why", ""],
          p.consumers.map((c) => [
            el("code", {}, c.login),
            c.consumer ?? "—",
            c.node ?? "—",
            el(
              "span",
              { class: "badges" },
              badge(c.state, STATES[c.state] ?? c.state),
              c.class ? badge("class", c.class) : null,
            ),
            when(c.since),
            el(
              "span",
              { class: "why" },
              c.why,
              c.attempts ? ` (${c.attempts} attempt${c.attempts === 1 ? "" : "s"})` : "",
              c.who && !c.why.includes(c.who) ? ` — by ${c.who}` : "",
            ),
            c.state === "retired"
              ? el(
                  "button",
                  {
                    class: "delete danger",
                    type: "button",
                    "data-login": c.login,
                    onclick: () => openDelete(p.module, c.login),
                  },
                  "Delete…",
                )
              : "",
          ]),
          "No consumers.",
        ),
        el("p", {}, el("a", { href: `#ledger/${encodeURIComponent(p.module)}` }, `${p.module}'s ledger`)),
      ),
    ];
  }

  function approvalsView() {
    const waiting = state.providers.filter((p) => p.waiting);
    return [
      el(
        "section",
        { id: "approvals" },
        el("h2", {}, "Retirements waiting for a person"),
        el(
          "p",
          { class: "muted" },
          "A provider retires consumers no longer asked for on its own only within its bound; a larger set waits here. Approving retires them: their logins stop working, their data is kept until deleted.",
        ),
        waiting.length === 0
          ? el("p", { class: "muted" }, "Nothing waits for approval.")
          : waiting.map(waitingBlock),
      ),
    ];
  }

  // Each entry as the controller reads it: the mesh's own record ("who via surface"), or what the
  // module says (its claim, flagged when it names an operator's action no relayed request bears out).
  function describeEntry(r) {
    const e = r.entry;
    const claim = r.claim ?? (e.kind === "action" ? claimOfEntry(e) : undefined);
    if (claim) {
      const freed = typeof claim.freedBytes === "number" ? `, ${claim.freedBytes} bytes freed` : "";
      const who = claim.who && claim.who !== "provisioner" ? ` by ${JSON.stringify(claim.who)}` : "";
      return [
        el("strong", {}, `${claim.module ?? "the module"} says: `),
        badge(
          claim.action === "deleted"
            ? "deleted"
            : claim.action === "retired"
              ? "retired"
              : claim.action === "approved"
                ? "awaiting-approval"
                : "active",
          claim.action || "?",
        ),
        " ",
        el("code", {}, claim.login || "?"),
        `${who}: ${claim.why ?? ""}${freed}`,
        r.matches !== undefined ? el("span", { class: "muted" }, ` (asked in #${r.matches})`) : null,
        r.flagged ? el("div", { class: "error" }, badge("failing", "flagged"), ` ${r.flagged}`) : null,
      ];
    }
    const by = `${r.recorded?.who ?? e.who ?? "?"} via ${r.recorded?.via ?? "the mesh"}`;
    if (e.kind === "tool") {
      const call = [e.tool, ...(e.args ?? [])].join(" ");
      const result = e.ok
        ? badge("active", "answered")
        : badge("failing", `refused${e.code ? ` (${e.code})` : ""}`);
      return [
        badge("class", "tool"),
        " ",
        el("code", {}, call),
        ` asked by ${by} `,
        result,
        e.ok ? "" : ` ${e.error ?? ""}`,
      ];
    }
    if (e.kind === "rotate") {
      const result = e.ok === false ? badge("failing", "failed") : badge("active", "rotated");
      return [
        badge("class", "rotate"),
        " ",
        el("code", {}, `${e.consumer ?? "?"} ${e.interface ?? "?"}`),
        ` asked by ${by} `,
        result,
        e.ok === false ? ` ${e.error ?? ""}` : "",
      ];
    }
    return [badge("unknown", String(e.kind ?? "entry")), " ", JSON.stringify(e)];
  }

  // An action entry read without the controller's reading: its claim, or (older) its own fields.
  function claimOfEntry(e) {
    const c = e.by?.claim === true && e.claim && typeof e.claim === "object" ? e.claim : e;
    return { action: c.action, login: c.login, who: c.who, why: c.why, freedBytes: c.freedBytes };
  }

  function ledgerView() {
    const modules = state.modules.map((m) => m.name);
    const picker = el(
      "select",
      {
        id: "ledger-module",
        "aria-label": "module",
        onchange: (e) => {
          location.hash = `#ledger/${encodeURIComponent(e.currentTarget.value)}`;
        },
      },
      modules.map((m) => el("option", { value: m, selected: m === ledger.module }, m)),
    );
    const reads = el("input", {
      type: "checkbox",
      id: "show-reads",
      checked: showReads,
      onchange: (e) => {
        showReads = e.currentTarget.checked;
        render();
      },
    });
    const reply = ledger.reply;
    let body;
    if (!reply) body = el("p", { class: "muted" }, "loading…");
    else if (!reply.ok) body = el("p", { class: "error" }, reply.error);
    else {
      // Which tools only read is the controller's to say (its tool table), with the ledger.
      const readOnly = new Set(reply.readOnlyTools ?? []);
      const entries = [...reply.entries]
        .reverse()
        .filter((r) => showReads || !(r.entry.kind === "tool" && readOnly.has(r.entry.tool)));
      const hidden = reply.entries.length - entries.length;
      body = [
        entries.length === 0 ? el("p", { class: "muted" }, "No entries yet.") : null,
        el(
          "ol",
          { class: "timeline", reversed: true },
          entries.map((r) =>
            el(
              "li",
              {
                "data-kind": r.entry.kind,
                "data-seq": r.seq,
                "data-flagged": r.flagged ? "true" : undefined,
              },
              el(
                "div",
                { class: "at" },
                el("span", { class: "seq" }, `#${r.seq}`),
                " ",
                // A claim's own time is only the module's word: the bus's is shown.
                when(r.entry.kind === "action" ? r.at : (r.entry.at ?? r.at)),
              ),
              el("div", { class: "what" }, describeEntry(r)),
            ),
          ),
        ),
        hidden > 0 ? el("p", { class: "muted" }, `${hidden} read-only tool call(s) hidden.`) : null,
      ];
    }
    return [
      el(
        "section",
        { id: "ledger" },
        el("h2", {}, "Ledger"),
        el(
          "div",
          { class: "controls" },
          el("label", {}, "Module ", picker),
          el("label", {}, reads, " show read-only tool calls"),
        ),
        el(
          "p",
          { class: "muted" },
          "Each module's history, newest first, as it is kept on the bus: every tool and rotation the mesh carried for it, with who asked, and what its provider says it did (its word alone, flagged where no request bears it out).",
        ),
        body,
      ),
    ];
  }

  // ---- actions

  async function approve(module, waiting, button) {
    button.disabled = true;
    notice(`approving the retirement of ${waiting.logins.join(", ")} on ${module}…`);
    try {
      const reply = await api("/api/approve", { module, id: waiting.id });
      if (reply.ok)
        notice(
          `${module} retired ${(reply.answer?.retired ?? waiting.logins).join(", ")}; the approval is in its ledger.`,
          "ok",
        );
      else notice(`${module} did not retire them: ${reply.error}`, "error");
    } catch (err) {
      notice(`the approval was not sent: ${messageOf(err)}`, "error");
    }
    await refresh();
  }

  function openDelete(module, login) {
    deleting = { module, login };
    $("delete-what").textContent = `${login}, a retired consumer of ${module}.`;
    $input("delete-typed").value = "";
    $("delete-error").hidden = true;
    $button("delete-confirm").disabled = false;
    $dialog("delete-dialog").showModal();
    $("delete-typed").focus();
  }

  function deleteRefused(text) {
    const e = $("delete-error");
    e.textContent = text;
    e.hidden = false;
  }

  async function confirmDelete(event) {
    event.preventDefault();
    if (!deleting) return;
    const { module, login } = deleting;
    const typed = $input("delete-typed").value;
    if (typed !== login) {
      deleteRefused(`“${typed}” is not ${login}: nothing was deleted. Type the login exactly.`);
      return;
    }
    $button("delete-confirm").disabled = true;
    try {
      const reply = await api("/api/delete", { module, login, typed });
      if (!reply.ok) {
        deleteRefused(`${module} did not delete ${login}: ${reply.error}`);
        $button("delete-confirm").disabled = false;
        return;
      }
      $dialog("delete-dialog").close();
      deleting = null;
      notice(`${module} deleted ${login}; the deletion is in its ledger.`, "ok");
    } catch (err) {
      deleteRefused(`the deletion was not sent: ${messageOf(err)}`);
      $button("delete-confirm").disabled = false;
    }
    await refresh();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("delete-form").addEventListener("submit", (e) => void confirmDelete(e));
    $("delete-cancel").addEventListener("click", () => {
      deleting = null;
      $dialog("delete-dialog").close();
    });
    $("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const code = $input("code-input").value.trim();
      $input("code-input").value = "";
      void logIn(code).then((ok) => ok && start());
    });
    $("logout").addEventListener("click", () => void logOut());
    window.addEventListener("hashchange", () => {
      notice("");
      const view = currentView();
      if (view.name === "ledger") void refresh();
      else render();
    });
    // A link from mesh dashboard: the code is taken off the address (and out of the history) first.
    const code = new URLSearchParams(location.search).get("code");
    if (code !== null) {
      history.replaceState(null, "", `/${location.hash}`);
      void logIn(code).then((ok) => ok && start());
    } else start();
  });
})();
