// The one shape of where a provider serves, as every reader of a module's answer checks it.
import { z } from "zod";

/**
 * Where a provider says it serves, as a module's `status` answer and a node's report carry it: a
 * host name or an IP address (no brackets, no path, no user) and a port. A module is untrusted:
 * what does not fit is refused at the boundary, never used to build a consumer's URL.
 */
export const servedEndpointSchema = z.object({
  host: z
    .string()
    .min(1)
    .max(253)
    .regex(/^[A-Za-z0-9:][A-Za-z0-9._:%-]*$/, { message: "is not a host name or an IP address" }),
  port: z.number().int().min(1).max(65_535),
});
