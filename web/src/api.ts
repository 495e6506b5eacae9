// The dashboard's only data source: the coordinator's public REST API (/v1/...).
// A bearer token, when the coordinator wants one, is kept in sessionStorage.
import type {
  Catalog,
  ErrorBody,
  ExportFormat,
  Job,
  JobResults,
  JobSpec,
  ListJobsResponse,
  ListWorkersResponse,
} from './types';

const TOKEN_KEY = 'paratune.token';

export function getToken(): string {
  try {
    return sessionStorage.getItem(TOKEN_KEY) ?? '';
  } catch {
    return '';
  }
}

export function setToken(token: string): void {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    // Storage disabled: the token lives only until reload.
  }
}

/** An HTTP error from the API, with the server's message when it sent one. */
export class ApiError extends Error {
  readonly httpStatus: number;
  readonly status: string;

  constructor(httpStatus: number, status: string, message: string) {
    super(message);
    this.name = 'ApiError';
    this.httpStatus = httpStatus;
    this.status = status;
  }
}

type UnauthorizedListener = (error: ApiError) => void;
const unauthorizedListeners: UnauthorizedListener[] = [];

/** Called whenever a request is answered 401 (the app then asks for a token). */
export function onUnauthorized(listener: UnauthorizedListener): void {
  unauthorizedListeners.push(listener);
}

/** Sends a request; returns the successful response (body unread), or throws ApiError with the server's message. */
async function send(method: 'GET' | 'POST', path: string, accept: string, body?: unknown): Promise<Response> {
  const headers: Record<string, string> = { Accept: accept };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response: Response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch (e) {
    throw new ApiError(0, 'UNAVAILABLE', `cannot reach the coordinator (${String(e)})`);
  }
  if (!response.ok) {
    const text = await response.text();
    let err: ErrorBody = {};
    try {
      err = (JSON.parse(text) ?? {}) as ErrorBody;
    } catch {
      err = {};
    }
    const message = err.message || text.trim() || response.statusText || 'request failed';
    const error = new ApiError(response.status, err.status || String(response.status), message);
    if (response.status === 401) unauthorizedListeners.forEach((l) => l(error));
    throw error;
  }
  return response;
}

async function request<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
  const text = await (await send(method, path, 'application/json', body)).text();
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new ApiError(200, 'INTERNAL', `${method} ${path}: the answer is not JSON`);
  }
}

/** An export as the coordinator renders it: the exact bytes (with their content type) and the file name it suggests. */
export interface ExportFile {
  blob: Blob;
  filename: string;
}

async function exportFile(path: string, fallbackName: string): Promise<ExportFile> {
  const response = await send('GET', path, '*/*');
  const disposition = response.headers.get('Content-Disposition') ?? '';
  const named = /filename="([^"]+)"/.exec(disposition);
  return { blob: await response.blob(), filename: named ? named[1] : fallbackName };
}

export const api = {
  listJobs: (pageSize = 100) =>
    request<ListJobsResponse>('GET', `/v1/jobs?page_size=${pageSize}`),
  getJob: (id: string) => request<Job>('GET', `/v1/jobs/${encodeURIComponent(id)}`),
  getResults: (id: string) =>
    request<JobResults>('GET', `/v1/jobs/${encodeURIComponent(id)}/results`),
  submitJob: (spec: JobSpec) => request<Job>('POST', '/v1/jobs', { spec }),
  cancelJob: (id: string) => request<Job>('POST', `/v1/jobs/${encodeURIComponent(id)}:cancel`),
  listWorkers: () => request<ListWorkersResponse>('GET', '/v1/workers'),
  getCatalog: () => request<Catalog>('GET', '/v1/catalog'),
  /** Layout `rank` (1 = best) of a finished job, rendered by the coordinator. */
  exportLayout: (id: string, rank: number, format: ExportFormat): Promise<ExportFile> =>
    exportFile(`/v1/jobs/${encodeURIComponent(id)}/results/${rank}:export?format=${format}`, `paratune-${id}-rank${rank}-${format}`),
};
