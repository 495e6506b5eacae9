// ParaTune dashboard: hash routes #/jobs, #/jobs/<id>, #/workers. Every page reads only
// the public REST API (api.ts), so a scheduler can get whatever the page shows.
import './style.css';
import { ApiError, getToken, onUnauthorized, setToken } from './api';
import { clear } from './dom';
import { renderJobPage } from './pages/job';
import { renderJobsPage } from './pages/jobs';
import { renderWorkersPage } from './pages/workers';

/** What a page returns: a function that stops its polling and frees its charts. */
export type Cleanup = () => void;

const main = document.getElementById('main') as HTMLElement;
const tokenDialog = document.getElementById('token-dialog') as HTMLDialogElement;
const tokenForm = document.getElementById('token-form') as HTMLFormElement;
const tokenInput = document.getElementById('token-input') as HTMLInputElement;
const tokenReason = document.getElementById('token-reason') as HTMLElement;
const tokenButton = document.getElementById('token-button') as HTMLButtonElement;

let cleanup: Cleanup | null = null;

function route(): void {
  if (cleanup) cleanup();
  cleanup = null;
  clear(main);
  const hash = location.hash.replace(/^#\/?/, '');
  const parts = hash.split('/').filter(Boolean).map(decodeURIComponent);
  document.querySelectorAll<HTMLAnchorElement>('[data-nav]').forEach((a) => {
    const active = (parts[0] ?? 'jobs') === a.dataset.nav;
    if (active) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  });
  if (parts[0] === 'workers') {
    document.title = 'Workers · ParaTune';
    cleanup = renderWorkersPage(main);
  } else if (parts[0] === 'jobs' && parts[1]) {
    document.title = `Job ${parts[1]} · ParaTune`;
    cleanup = renderJobPage(main, parts[1]);
  } else {
    document.title = 'Jobs · ParaTune';
    cleanup = renderJobsPage(main);
  }
}

function openTokenDialog(reason: string): void {
  if (tokenDialog.open) return;
  tokenReason.textContent = reason;
  tokenInput.value = getToken();
  tokenDialog.showModal();
  tokenInput.focus();
}

tokenForm.addEventListener('submit', (event) => {
  const submitter = (event as SubmitEvent).submitter as HTMLButtonElement | null;
  const action = submitter?.value ?? 'save';
  if (action === 'save') setToken(tokenInput.value.trim());
  if (action === 'clear') setToken('');
  if (action !== 'cancel') setTimeout(route, 0);
});

tokenButton.addEventListener('click', () =>
  openTokenDialog('Bearer token sent with every request (leave empty if the coordinator has none).'),
);

onUnauthorized((error: ApiError) =>
  openTokenDialog(`The coordinator answered 401: ${error.message}. Enter its bearer token.`),
);

window.addEventListener('hashchange', route);
route();
