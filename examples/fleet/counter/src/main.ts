// The counter app: a consumer of `redis-namespace`. Every few seconds it counts a visit under its
// own key prefix in the Redis namespace the mesh gave it, and says the count. With a bus credential
// it also counts the notes app's `note.created` events it hears.
import { Redis } from "ioredis";
import { main, type Credential, type Session } from "../../lib/consumer.ts";
import { startEvents } from "../../lib/module-events.ts";

const events = startEvents("counter");
let notesHeard = 0;
events.on("notes.note.created", (event) => {
  notesHeard++;
  console.log(`counter: heard notes.note.created #${notesHeard} ${JSON.stringify(event.body)}`);
});

async function connect(credential: Credential): Promise<Session> {
  // The provider derives the prefix (`<login>:`); the ACL confines this login to keys under it.
  const given = credential.values["prefix"];
  const prefix = typeof given === "string" && given !== "" ? given : `${credential.login}:`;
  const key = `${prefix}visits`;
  const client = new Redis({
    host: credential.host,
    port: credential.port,
    username: credential.login,
    password: credential.password,
    lazyConnect: true,
    connectTimeout: 5_000,
    commandTimeout: 5_000,
    // INFO, which the ready check sends, is not a consumer's command.
    enableReadyCheck: false,
    // Reconnecting is the app's loop's job: it re-reads the credential first, for a new password.
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
  });
  let lost: Error | undefined;
  client.on("error", (err: Error) => {
    lost = err;
  });
  client.on("end", () => {
    lost ??= new Error("the server closed the connection");
  });
  const close = async (): Promise<void> => {
    client.disconnect();
    await Promise.resolve();
  };
  try {
    await client.connect();
    // Without a ready check, connect() resolves before Redis answers AUTH: a refused password
    // shows only on the first command, so one is sent here, where a refusal means "not yet".
    await client.ping();
  } catch (err) {
    await close();
    // The reason (WRONGPASS, ECONNREFUSED) arrives as an error event; the rejection only says
    // the connection closed.
    throw lost ?? err;
  }
  return {
    async step() {
      if (lost) throw lost;
      const visits = await client.incr(key);
      const heard = events.enabled ? `; heard ${notesHeard} new note${notesHeard === 1 ? "" : "s"}` : "";
      return `counted visit #${visits} under ${key}${heard}`;
    },
    close,
  };
}

main({ name: "counter", interface: "redis-namespace", connect });
