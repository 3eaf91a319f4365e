// Runs the s3 provider on its own, configured by environment variables (see runProviderMain);
// `mesh provider s3` is the same with flags.
import { runProviderMain } from "@mesh/sdk/provider";
import { provider } from "./index.ts";

// The AWS SDK warns, once per process, that its releases after January 2027 will need Node 22. The
// version this package pins runs on Node 20; the warning would only fill the provider's log.
process.env["AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED"] ??= "true";

await runProviderMain(provider);
