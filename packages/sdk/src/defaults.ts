// The harness's periodic settings when it is not told otherwise, declared once: the harness, the
// provider process and the command line all read them from here.

import { DEFAULT_RETIREMENT_LIMITS } from "./retirement.ts";

/** How often a provider passes when not told (5 s). */
export const DEFAULT_EVERY_MS = 5_000;
/** How often it verifies each consumer when not told (60 s). */
export const DEFAULT_VERIFY_EVERY_MS = 60_000;

/**
 * How long a rotated-out password stays valid beside the new one, when not told (2 min): the apps
 * that hold it have that long to move, where the backend cannot say which password a session used.
 */
export const DEFAULT_ROTATION_GRACE_MS = 2 * 60_000;

/** Every setting of `runProvisioner` that has a default, in milliseconds where it is a duration. */
export const PROVISIONER_DEFAULTS = {
  instance: "default",
  every: DEFAULT_EVERY_MS,
  verifyEvery: DEFAULT_VERIFY_EVERY_MS,
  holdsTimeout: 30_000,
  createTimeout: 60_000,
  failingAfter: 5 * 60_000,
  sayAgainEvery: 15 * 60_000,
  ...DEFAULT_RETIREMENT_LIMITS,
  maxBrake: 60 * 60_000,
  concurrency: 8,
  verifyBatch: 100,
  rotationGrace: DEFAULT_ROTATION_GRACE_MS,
} as const;
