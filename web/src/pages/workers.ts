// The workers page: registered profiling workers, their devices and state.
import { api } from '../api';
import { clear, h } from '../dom';
import { bytes, num, timeAgo } from '../format';
import type { WorkerInfo } from '../types';
import { errorBanner, poll } from './common';

function workerRow(w: WorkerInfo): HTMLTableRowElement {
  const devices = w.devices ?? [];
  const deviceText = devices.length
    ? `${devices.length} × ${devices[0].name || w.device_kind || '?'} (${bytes(num(devices[0].memory_bytes))})`
    : '–';
  return h(
    'tr',
    { 'data-worker-id': w.id ?? '' },
    h('td', {}, w.name || w.id || '?', h('div', { class: 'sub mono' }, w.id ?? '')),
    h('td', {}, h('span', { class: `badge worker-${w.state || 'unknown'}` }, w.state || 'unknown')),
    h('td', {}, w.backend || '?'),
    h('td', {}, w.device_kind || '?'),
    h('td', {}, deviceText),
    h('td', { class: 'num' }, String(num(w.cpu_cores))),
    h('td', { class: 'num' }, bytes(num(w.memory_bytes))),
    h('td', { class: 'mono' }, w.current_task_id || '–'),
    h('td', {}, timeAgo(num(w.last_heartbeat_unix_ms))),
  );
}

export function renderWorkersPage(root: HTMLElement): () => void {
  const status = h('div', { 'aria-live': 'polite' });
  const tbody = h('tbody');
  root.append(
    h('h1', {}, 'Workers'),
    h(
      'section',
      { class: 'card', 'aria-labelledby': 'workers-title' },
      h('h2', { id: 'workers-title' }, 'Registered workers'),
      h('p', { class: 'hint' }, 'Workers measure kernels for jobs in profile mode (paratune-worker --coordinator HOST:PORT).'),
      status,
      h(
        'div',
        { class: 'table-scroll' },
        h(
          'table',
          { class: 'data', id: 'workers-table' },
          h('thead', {}, h('tr', {}, ...['Worker', 'State', 'Backend', 'Device kind', 'Devices', 'CPU cores', 'Memory', 'Current task', 'Last heartbeat'].map((t) => h('th', { scope: 'col' }, t)))),
          tbody,
        ),
      ),
    ),
  );
  return poll(async () => {
    try {
      const res = await api.listWorkers();
      const workers = res.workers ?? [];
      clear(tbody);
      for (const w of workers) tbody.append(workerRow(w));
      if (!workers.length) tbody.append(h('tr', {}, h('td', { colspan: 9, class: 'empty' }, 'No worker registered.')));
      clear(status);
    } catch (e) {
      clear(status);
      status.append(errorBanner(e));
    }
  }, 2000);
}
