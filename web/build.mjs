// Builds the web console (docs/console.md): type-checks it with tsc, bundles src/main.tsx with
// esbuild into OUT (app-<hash>.js, app-<hash>.css), and writes OUT/index.html naming them.
// CMake runs it (src/server/console_assets.cmake) with the packages `npm ci` put in the build
// folder; by hand, after `npm ci` here: `npm run build` (OUT: dist).
//
//   node build.mjs --out DIR [--node-modules DIR] [--no-check]
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const out = path.resolve(arg('--out', path.join(here, 'dist')));
const nodeModules = path.resolve(arg('--node-modules', path.join(here, 'node_modules')));
if (!fs.existsSync(path.join(nodeModules, 'esbuild'))) {
  console.error(`build.mjs: no esbuild under ${nodeModules}: run \`npm ci\` first`);
  process.exit(1);
}
const require = createRequire(path.join(nodeModules, 'noop.js'));

// Type check: the sources as they are, resolving packages in nodeModules (which may be outside
// this folder, in the build tree).
if (!args.includes('--no-check')) {
  const config = path.join(path.dirname(out), 'tsconfig.check.json');
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(config, JSON.stringify({
    extends: path.join(here, 'tsconfig.json'),
    compilerOptions: {
      baseUrl: nodeModules,
      paths: { '*': ['*', '@types/*'] },
      typeRoots: [path.join(nodeModules, '@types')],
      types: [],
    },
    include: [path.join(here, 'src')],
  }, null, 2));
  try {
    execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', config],
                 { stdio: 'inherit' });
  } catch {
    console.error('build.mjs: the console does not type-check (tsc, above)');
    process.exit(1);
  }
}

const esbuild = require('esbuild');
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out, { recursive: true });
const result = await esbuild.build({
  entryPoints: { app: path.join(here, 'src', 'main.tsx') },
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  nodePaths: [nodeModules],
  outdir: out,
  entryNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'eof',
  logLevel: 'warning',
});
const outputs = Object.keys(result.metafile.outputs).map((p) => path.basename(p));
const js = outputs.find((f) => f.endsWith('.js'));
const css = outputs.find((f) => f.endsWith('.css'));
if (!js || !css) {
  console.error(`build.mjs: esbuild wrote ${outputs.join(', ')}: expected a .js and a .css`);
  process.exit(1);
}
const html = fs.readFileSync(path.join(here, 'src', 'index.html'), 'utf8')
  .replaceAll('{{APP_JS}}', js).replaceAll('{{APP_CSS}}', css);
fs.writeFileSync(path.join(out, 'index.html'), html);
fs.copyFileSync(path.join(here, 'src', 'favicon.svg'), path.join(out, 'favicon.svg'));
console.log(`build.mjs: ${out}: index.html, ${js}, ${css}, favicon.svg`);
