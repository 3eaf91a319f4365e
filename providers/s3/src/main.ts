// Runs the s3 provider on its own, configured by environment variables (see runProviderMain);
// `mesh provider s3` is the same with flags.
import { runProviderMain } from "@mesh/sdk";
import { provider } from "./index.ts";

await runProviderMain(provider);
