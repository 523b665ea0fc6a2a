/**
 * The one way the panel talks to the server: requestAPI() returns the decoded JSON payload or
 * throws KtrainApiError (status + the server's {"error": message}). A 404 on the API root means
 * the server extension is not installed/enabled, and the error says so.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  ComparePayload,
  JobDetail,
  JobsPayload,
  LogsPayload,
  MetricsPayload,
  StacksPayload,
  SweepDetail,
  SweepsPayload
} from './payloads';

export const API_ROOT = 'ktrain/api';
export const NOT_INSTALLED =
  'jupyter-ktrain server extension not installed (or not enabled): ' +
  'pip install jupyter-ktrain, then restart Jupyter ' +
  '(or `jupyter server extension enable jupyter_ktrain`).';

export class KtrainApiError extends Error {
  constructor(
    message: string,
    readonly status: number
  ) {
    super(message);
    this.name = 'KtrainApiError';
  }
}

async function errorFrom(response: Response, path: string): Promise<KtrainApiError> {
  let message = '';
  try {
    const body = (await response.json()) as { error?: unknown; message?: unknown } | null;
    const text = body?.error ?? body?.message;
    message = typeof text === 'string' ? text : '';
  } catch {
    message = '';
  }
  if (response.status === 404 && !message) {
    message = NOT_INSTALLED;
  }
  return new KtrainApiError(
    message || `${response.status} ${response.statusText} from /${API_ROOT}/${path}`,
    response.status
  );
}

export async function requestAPI<T>(
  path = '',
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_ROOT, path);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new KtrainApiError(`Jupyter server unreachable: ${String(error)}`, 0);
  }
  if (!response.ok) {
    throw await errorFrom(response, path);
  }
  return (await response.json()) as T;
}

function query(params: { [key: string]: string | number | null | undefined }): string {
  const parts = Object.entries(params)
    .filter(([, v]) => v !== null && v !== undefined && v !== '')
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  return parts.length ? `?${parts.join('&')}` : '';
}

const job = (name: string) => `jobs/${encodeURIComponent(name)}`;

export const api = {
  /** Resolves when the server extension answers; rejects with NOT_INSTALLED on 404. */
  ping: () => requestAPI<{ version: string }>(''),
  jobs: () => requestAPI<JobsPayload>('jobs'),
  job: (name: string) => requestAPI<JobDetail>(job(name)),
  logs: (
    name: string,
    p: { rank?: number | null; ranks?: string; grep?: string; offset?: string }
  ) => requestAPI<LogsPayload>(`${job(name)}/logs${query(p)}`),
  metrics: (name: string) => requestAPI<MetricsPayload>(`${job(name)}/metrics`),
  stacks: (name: string, rank: number | null = null) =>
    requestAPI<StacksPayload>(`${job(name)}/stacks${query({ rank })}`),
  cancel: (name: string) => requestAPI<JobDetail>(`${job(name)}/cancel`, { method: 'POST' }),
  compare: (jobs: string[], metric: string | null, backend: string) =>
    requestAPI<ComparePayload>(`compare${query({ jobs: jobs.join(','), metric, backend })}`),
  sweeps: () => requestAPI<SweepsPayload>('sweeps'),
  sweep: (name: string) => requestAPI<SweepDetail>(`sweeps/${encodeURIComponent(name)}`)
};
