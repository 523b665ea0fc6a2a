/**
 * One place for what the browser knows of each job's progress: the job list and a job's tab
 * show the same figures. Whoever polls the server last (the list every few seconds, an open
 * job tab every second) publishes here, and both redraw from it.
 */
import { JobSummary } from './payloads';

type Listener = (job: JobSummary) => void;

const listeners = new Set<Listener>();

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
