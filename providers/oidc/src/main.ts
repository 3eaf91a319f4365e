// Runs the oidc provider on its own, configured by environment variables (see runProviderMain);
// `mesh provider oidc` is the same with flags.
import { runProviderMain } from "@mesh/sdk/provider";
import { provider } from "./index.ts";

await runProviderMain(provider);
