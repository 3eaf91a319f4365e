// The notes app: a consumer of `postgres-database`. Every few seconds it stores a note in the
// database the mesh gave it and says how many it holds, so a person watching `mesh up` sees a
// consumer working under the login and password the mesh made for it. With a bus credential it
// also emits `note.created` for every note it stores.
import pg from "pg";
import { main, type Credential, type Session } from "../../lib/consumer.ts";
import { startEvents } from "../../lib/module-events.ts";

const events = startEvents("notes");

async function connect(credential: Credential): Promise<Session> {
  const database = decodeURIComponent(credential.path.replace(/^\//, ""));
  const client = new pg.Client({
    host: credential.host,
    port: credential.port,
    user: credential.login,
    // Given on its own, never in a URL: a URL ends up in messages.
    password: credential.password,
    database,
    application_name: "notes",
    connectionTimeoutMillis: 5_000,
    query_timeout: 10_000,
  });
  // A server that ends the session (a restart, the mesh retiring this consumer) emits an error on
  // an idle client: kept for the next step to report, instead of crashing the process.
  let lost: Error | undefined;
  client.on("error", (err) => {
    lost = err;
  });
  const close = async (): Promise<void> => {
    await client.end().catch(() => {});
  };
  try {
    await client.connect();
    await client.query(
      `CREATE TABLE IF NOT EXISTS notes (
         id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         body text NOT NULL,
         written_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
  } catch (err) {
    await close();
    throw err;
  }
  return {
    async step() {
      if (lost) throw lost;
      const at = new Date().toISOString();
      const inserted = await client.query<{ id: string }>(
        "INSERT INTO notes (body) VALUES ($1) RETURNING id",
        [`a note written at ${at}`],
      );
      const counted = await client.query<{ n: number }>("SELECT count(*)::int AS n FROM notes");
      const id = inserted.rows[0]?.id ?? "?";
      const n = counted.rows[0]?.n ?? 0;
      events.emit("note.created", { id: Number(id), at });
      return `stored note #${id}, the database now holds ${n} note${n === 1 ? "" : "s"}`;
    },
    close,
  };
}

main({ name: "notes", interface: "postgres-database", connect });
