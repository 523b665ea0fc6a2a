/**
 * One colour per rank everywhere: the log labels and every chart's traces (the server sends
 * each trace's colour). The palette is generated from jupyter_ktrain/monitor/viewmodel.py
 * (palette.ts), which the cell widget uses too.
 */
import { NO_RANK_COLOUR, OTHER_STATE_COLOUR, PALETTE, STATE_COLOURS } from './palette';
import { JobState } from './payloads';

/** The colour of rank ``rank`` (grey for lines of no rank: the agent, torchrun). */
export function rankColour(rank: number | null): string {
  return rank === null ? NO_RANK_COLOUR : PALETTE[rank % PALETTE.length];
}

/** A job state's colour (Running green, Failed red...), as in the cell's header. */
export function stateColour(state: JobState): string {
  return STATE_COLOURS[state] ?? OTHER_STATE_COLOUR;
}
