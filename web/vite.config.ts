// Vite build of the ParaTune dashboard. Relative base so the coordinator can serve dist/
// from any directory (--dashboard-dir); everything (ECharts included) is bundled, no CDN.
import { defineConfig } from 'vite';

export default defineConfig({
  base: './',
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2020',
    chunkSizeWarningLimit: 1200,
    reportCompressedSize: false,
  },
  server: {
    // `npm run mock` serves the REST API on 8787; `npx vite` proxies to it in development.
    proxy: { '/v1': 'http://127.0.0.1:8787' },
  },
});
