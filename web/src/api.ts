// The dashboard's only data source: the coordinator's public REST API (/v1/...).
// A bearer token, when the coordinator wants one, is kept in sessionStorage.
import type {
  ErrorBody,
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

async function request<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: 'application/json' };
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
  const text = await response.text();
  let parsed: unknown = undefined;
  if (text) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
  }
  if (!response.ok) {
    const err = (parsed ?? {}) as ErrorBody;
    const message = err.message || text.trim() || response.statusText || 'request failed';
    const error = new ApiError(response.status, err.status || String(response.status), message);
    if (response.status === 401) unauthorizedListeners.forEach((l) => l(error));
    throw error;
  }
  if (parsed === undefined) {
    throw new ApiError(response.status, 'INTERNAL', `${method} ${path}: the answer is not JSON`);
  }
  return parsed as T;
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
};
