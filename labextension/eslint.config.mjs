// ESLint (flat config) for the side panel's TypeScript: typescript-eslint's type-checked
// recommendations, formatting left to prettier (eslint-config-prettier turns off the rules
// that would disagree with it). `npm run lint` runs both; `make lint` runs that.
import { dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['lib/', 'node_modules/', 'style/', '*.mjs', '*.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: dirname(fileURLToPath(import.meta.url))
      }
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }]
    }
  },
  prettier,
  // after prettier's config, which turns `curly` off: braces always, as the code is written
  { rules: { curly: ['error', 'all'], eqeqeq: ['error', 'always'], 'prefer-const': 'error' } }
);
