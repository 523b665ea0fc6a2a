/**
 * One colour per rank everywhere: the log labels, every chart's traces, and (the same list in
 * jupyter_ktrain/widgets/monitor.py) the cell widget.
 */
export const COLOURS = [
  '#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e',
  '#17becf', '#8c564b', '#e377c2', '#bcbd22', '#7f7f7f'
];

/** The colour of rank ``rank`` (grey for lines of no rank: the agent, torchrun). */
export function rankColour(rank: number | null): string {
  return rank === null ? '#888888' : COLOURS[rank % COLOURS.length];
}

/** The colour of a trace labelled ``rank N`` (by rank) or anything else (by position). */
export function traceColour(label: string, index: number): string {
  const m = /^rank (\d+)$/.exec(label);
  return m ? rankColour(Number(m[1])) : COLOURS[index % COLOURS.length];
}
