// The example apps' events: on when the agent handed the module a bus credential (MESH_BUS_CREDS),
// off otherwise, and said once either way. An app's own work never waits for the bus: an event
// emitted before the bus answers is dropped, and a subscription starts once it does.
import { connectModuleBus, type EventHandler, type Logger, type ModuleBus } from "@mesh/sdk";

/** An app's events, whether the bus is there or not. */
export interface AppEvents {
  /** Whether the module was given a bus credential (the bus may still be connecting). */
  readonly enabled: boolean;
  /** Emits a declared event when the bus is connected; otherwise does nothing. Never throws. */
  emit(event: string, body: unknown): void;
  /** Subscribes `handler` to `pattern` as soon as the bus is connected. */
  on(pattern: string, handler: EventHandler): void;
}

/**
 * Starts `app`'s events from the variables the agent sets (see connectModuleBus in @mesh/sdk), or
 * says once that they are off when MESH_BUS_CREDS is not set.
 */
export function startEvents(app: string): AppEvents {
  const say = (text: string): void => console.log(`${app}: ${text}`);
  const logger: Logger = {
    info: say,
    warn: (m) => say(`warning: ${m}`),
    error: (m) => say(`error: ${m}`),
  };
  const enabled = (process.env["MESH_BUS_CREDS"] ?? "") !== "";
  const subscriptions: [string, EventHandler][] = [];
  let bus: ModuleBus | undefined;
  let failed = false;

  if (!enabled) {
    say(
      "events are off: MESH_BUS_CREDS is not set (the agent sets it once the controller has issued this module a bus credential)",
    );
  } else {
    void (async () => {
      try {
        const connected = await connectModuleBus({ logger, waitForServer: true });
        bus = connected;
        for (const [pattern, handler] of subscriptions) connected.on(pattern, handler);
        // Said only once the server has the subscriptions: from then on nothing emitted is missed.
        await connected.flush();
        say("events are on");
      } catch (err) {
        const opened = bus;
        bus = undefined;
        await opened?.close();
        say(`events are off: ${err instanceof Error ? err.message : String(err)}`);
      }
    })();
  }

  return {
    enabled,
    emit(event, body) {
      if (bus === undefined) return;
      try {
        bus.emit(event, body);
      } catch (err) {
        // A mistake in the app (an undeclared event, a body that is not JSON): said once, and
        // the app's own work goes on.
        if (!failed) say(`could not emit ${event}: ${err instanceof Error ? err.message : String(err)}`);
        failed = true;
      }
    },
    on(pattern, handler) {
      subscriptions.push([pattern, handler]);
      bus?.on(pattern, handler);
    },
  };
}
