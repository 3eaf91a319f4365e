// Lint: type-aware rules that catch what bites a reconcile loop (floating promises, misused
// promises) and an import rule that keeps packages to each other's faces. Circles among the sources
// are found by scripts/import-cycles.mjs (test/import-cycles.test.ts), which sees type imports too.
import tseslint from "typescript-eslint";

export default tseslint.config(
  {
    ignores: [
      "**/node_modules/**",
      "**/dist/**",
      "packages/cli/bundle*/**",
      "scripts/**",
      "eslint.config.js",
    ],
  },
  ...tseslint.configs.recommended,
  {
    files: ["**/*.ts"],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": [
        "error",
        {
          // node:test's describe/it return promises the runner itself awaits.
          allowForKnownSafeCalls: [
            {
              from: "package",
              package: "node:test",
              name: ["describe", "it", "test", "suite", "before", "after", "beforeEach", "afterEach"],
            },
          ],
        },
      ],
      "@typescript-eslint/no-misused-promises": ["error", { checksVoidReturn: { arguments: false } }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/consistent-type-imports": "error",

      "no-restricted-imports": [
        "error",
        { patterns: [{ group: ["@mesh/*/src/*"], message: "import a package by its name, not its src/" }] },
      ],
    },
  },
  // The dashboard's browser script: type-aware like the sources, through its own tsconfig
  // (packages/controller/static/tsconfig.json, the DOM's types), so a promise it drops is caught too.
  {
    files: ["packages/controller/static/**/*.js"],
    languageOptions: {
      sourceType: "script",
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": ["error", { checksVoidReturn: { arguments: false } }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
    },
  },
);
