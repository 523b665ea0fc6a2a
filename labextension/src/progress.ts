/**
 * One place for what the browser knows of each job's progress (and each sweep's): the job list
 * and a job's tab show the same figures, the Sweeps list and a sweep's tab too. Whoever polls
 * the server last (the list every few seconds, an open tab every second) publishes here, and
 * both redraw from it.
 */
import { JobSummary, SweepSummary } from './payloads';

type Listener = (job: JobSummary) => void;
type SweepListener = (sweep: SweepSummary) => void;

const listeners = new Set<Listener>();
const sweepListeners = new Set<SweepListener>();

/** A fresher summary of ``sweep`` (from GET sweeps/NAME): tell every view. */
export function publishSweep(sweep: SweepSummary): void {
  for (const listener of Array.from(sweepListeners)) {
    listener(sweep);
  }
}

/** Call ``listener`` with each published sweep summary; returns the unsubscribe function. */
export function subscribeSweeps(listener: SweepListener): () => void {
  sweepListeners.add(listener);
  return () => sweepListeners.delete(listener);
}

/** A fresher summary of ``job`` (from GET jobs or GET jobs/NAME): tell every view. */
export function publish(job: JobSummary): void {
  for (const listener of Array.from(listeners)) {
    listener(job);
  }
}

/** Call ``listener`` with each published summary; returns the unsubscribe function. */
export function subscribe(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}
