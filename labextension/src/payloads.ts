/**
 * Wire payloads of the /ktrain/api REST API: mirror of jupyter_ktrain/server/payloads.py.
 * Change both files together.
 */

export interface ErrorPayload {
  error: string;
}

export interface ProgressPayload {
  step: number;
  total: number | null;
  percent: number | null;
  eta_s: number | null;
  text: string;
}

export interface JobSummary {
  name: string;
  backend: string;
  state: string;
  reason: string;
  message: string;
  started: number | null;
  finished: number | null;
  age_s: number | null;
  progress: ProgressPayload | null;
}

export interface BackendProblem {
  backend: string;
  error: string;
}

export interface JobsPayload {
  jobs: JobSummary[];
  problems: BackendProblem[];
  now: number;
}

export interface ReplicaPayload {
  name: string;
  phase: string;
  restarts: number;
  node: string;
  exit_code: number | null;
  last_event: string;
}

export interface JobDetail extends JobSummary {
  replicas: ReplicaPayload[];
  exit_codes: { [rank: string]: number };
  failed_rank: number | null;
  terminal: boolean;
  /** A failed or cancelled job: the first failing rank, its kind of failure, its last lines. */
  failure: string | null;
}

export interface LogLinePayload {
  label: string;
  rank: number | null;
  source: string;
  text: string;
}

export interface LogsPayload {
  lines: LogLinePayload[];
  next_offset: string;
  more: boolean;
  terminal: boolean;
}

export interface MetricTrace {
  label: string;
  x: number[];
  y: number[];
}

export interface MetricPanel {
  name: string;
  x_title: string;
  traces: MetricTrace[];
}

export interface MetricsPayload {
  panels: MetricPanel[];
}
