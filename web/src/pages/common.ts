// Pieces shared by the pages: polling, state badges, progress, error banners, export buttons.
import { api, ApiError } from '../api';
import { clear, download, h } from '../dom';
import { num, stateLabel } from '../format';
import type { ExportFormat, Int64, Job, JobStateName } from '../types';

/** Calls `tick` now and then every `intervalMs` after it settles, until stopped. */
export function poll(tick: () => Promise<boolean | void>, intervalMs: number): () => void {
  let stopped = false;
  let timer: number | undefined;
  const run = async () => {
    if (stopped) return;
    let again: boolean | void = true;
    try {
      again = await tick();
    } catch {
      again = true;
    }
    if (!stopped && again !== false) timer = window.setTimeout(run, intervalMs);
  };
  void run();
  return () => {
    stopped = true;
    if (timer !== undefined) window.clearTimeout(timer);
  };
}

export function stateBadge(state: JobStateName | undefined): HTMLElement {
  const label = stateLabel(state);
  return h('span', { class: `badge state-${label}`, 'data-state': state ?? 'JOB_STATE_UNSPECIFIED' }, label);
}

/** A progress bar with a one-line caption: tasks for profile jobs, the phase otherwise. */
export function jobProgress(job: Job): HTMLElement {
  const p = job.progress ?? {};
  const total = num(p.tasks_total);
  const done = num(p.tasks_done);
  const failed = num(p.tasks_failed);
  const cached = num(p.tasks_cached);
  const state = job.state;
  const terminal = state === 'JOB_STATE_SUCCEEDED' || state === 'JOB_STATE_FAILED' || state === 'JOB_STATE_CANCELLED';
  const bar = h('progress', { max: total > 0 ? total : 1 });
  if (total > 0) bar.value = done;
  else if (terminal) bar.value = state === 'JOB_STATE_SUCCEEDED' ? 1 : 0;
  else bar.removeAttribute('value');
  let caption: string;
  if (total > 0) {
    caption = `${done}/${total} tasks`;
    if (cached) caption += `, ${cached} cached`;
    if (failed) caption += `, ${failed} failed`;
    if (!terminal && num(p.eta_s) > 0) caption += `, ~${Math.ceil(num(p.eta_s))} s left`;
  } else {
    caption = terminal ? stateLabel(state) : `${stateLabel(state)}…`;
  }
  bar.setAttribute('aria-label', `progress: ${caption}`);
  return h('div', { class: 'progress' }, bar, h('span', { class: 'progress-caption' }, caption));
}

export function errorBanner(error: unknown): HTMLElement {
  const message =
    error instanceof ApiError
      ? `${error.status}${error.httpStatus ? ` (HTTP ${error.httpStatus})` : ''}: ${error.message}`
      : error instanceof Error
        ? error.message
        : String(error);
  return h('div', { class: 'error', role: 'alert' }, message);
}

export function jobTitle(job: Job): string {
  const m = job.spec?.model ?? {};
  return job.name || job.spec?.name || m.name || m.preset || job.id || 'job';
}

/** A button that downloads the ranked layout at `position` of job `jobId` in `format`,
 * reporting a failure in `status`. */
export function exportButton(
  id: string,
  jobId: string,
  position: number,
  format: ExportFormat,
  label: string,
  status: HTMLElement,
): HTMLElement {
  return h(
    'button',
    {
      type: 'button',
      id,
      onclick: async () => {
        clear(status);
        try {
          const file = await api.exportLayout(jobId, position, format);
          download(file.filename, file.blob);
        } catch (e) {
          status.append(errorBanner(e));
        }
      },
    },
    label,
  );
}

export type SortDir = 'ascending' | 'descending';

/** A column of a ranked table: `value` is the sort key (numbers sort numerically, strings
 * lexically); `firstDir` the direction of the first click (better values first). */
export interface Column<T, Extra = never> {
  key: string;
  label: string;
  title: string;
  value: (r: T) => number | string;
  cell: (r: T, extra: Extra) => Node | string;
  firstDir: SortDir;
  numeric: boolean;
}

/** Which column a ranked table is sorted by, and in which direction. */
export interface SortState {
  key: string;
  dir: SortDir;
}

/** `ranked` with their indexes, ordered by the column `sort.key` names (the first column when
 * unknown) in direction `sort.dir`; ties keep rank order. */
export function sortByColumn<T extends { rank?: Int64 | null }, Extra>(ranked: T[], columns: Column<T, Extra>[], sort: SortState): { r: T; i: number }[] {
  const col = columns.find((c) => c.key === sort.key) ?? columns[0];
  const sign = sort.dir === 'ascending' ? 1 : -1;
  return ranked
    .map((r, i) => ({ r, i }))
    .sort((a, b) => {
      const va = col.value(a.r);
      const vb = col.value(b.r);
      const cmp = typeof va === 'number' && typeof vb === 'number' ? va - vb : String(va).localeCompare(String(vb));
      return cmp !== 0 ? sign * cmp : num(a.r.rank) - num(b.r.rank);
    });
}

/** Fills `thead` with the header row of a sortable ranked table: one button per column; a
 * click sorts by that column (a second click reverses it), calls `render` (which refills
 * `thead`) and keeps the focus on the column's button. */
export function renderSortHeader<T, Extra>(thead: HTMLElement, columns: Column<T, Extra>[], sort: SortState, render: () => void): void {
  clear(thead);
  thead.append(
    h(
      'tr',
      {},
      ...columns.map((col) => {
        const active = col.key === sort.key;
        return h(
          'th',
          { scope: 'col', 'aria-sort': active ? sort.dir : 'none', 'data-col': col.key },
          h(
            'button',
            {
              type: 'button',
              class: 'sort',
              title: `${col.title} (sort)`,
              'data-sort-key': col.key,
              onclick: () => {
                if (sort.key === col.key) sort.dir = sort.dir === 'ascending' ? 'descending' : 'ascending';
                else {
                  sort.key = col.key;
                  sort.dir = col.firstDir;
                }
                render();
                (thead.querySelector(`button[data-sort-key="${col.key}"]`) as HTMLButtonElement | null)?.focus();
              },
            },
            col.label,
            h('span', { class: 'sort-mark', 'aria-hidden': 'true' }, active ? (sort.dir === 'ascending' ? ' ▲' : ' ▼') : ''),
          ),
        );
      }),
    ),
  );
}
