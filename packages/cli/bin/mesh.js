#!/usr/bin/env node
// The mesh command. The sources are TypeScript run through tsx, so there is no build step to forget.
import { register } from "tsx/esm/api";

register();
await import("../src/main.ts");
