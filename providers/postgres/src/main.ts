// Runs the postgres provider on its own, configured by environment variables (see runProviderMain);
// `mesh provider postgres` is the same with flags.
import { runProviderMain } from "@mesh/sdk/provider";
import { provider } from "./index.ts";

await runProviderMain(provider);
