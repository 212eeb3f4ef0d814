import type { BenchEnv } from './env';
import type { Inspector, ProfileSummary } from './profiler';
import type { Repeated } from './stats';

/** One line of a results table: the hub's figure, its baselines from the same run, the target. */
export interface Figure {
  metric: string;
  unit: string;
  hub: Repeated;
  baselines?: { label: string; value: Repeated; unit?: string }[];
  /** e.g. "hub = 31% of ceiling", "1.8× Socket.IO" */
  compare?: string;
  target?: string;
  /** true/false when a target applies, undefined otherwise. */
  met?: boolean;
}

export interface ScenarioResult {
  name: string;
  title: string;
  /** How it was measured (sizes, repetitions, what counts as done). */
  method: string[];
  figures: Figure[];
  /** Counters and per-frame costs that explain the figures. */
  evidence: string[];
  /** Named numbers the analysis section of RESULTS.md reasons from (ms, frames/s, …). */
  data?: Record<string, number>;
  /** Milliseconds the scenario took, setup included. */
  elapsedMs?: number;
  error?: string;
  /** With --profile: where the hub isolate's CPU went during the scenario. */
  profile?: ProfileSummary;
  /** What the profile covers, when not the whole scenario. */
  profileScope?: string;
}

export interface ScenarioContext {
  env: BenchEnv;
  quick: boolean;
  /** Repetitions of each timed measurement. */
  reps: number;
  log(msg: string): void;
  /**
   * True once the scenario has used its share of the run's time budget: loops stop starting new
   * repetitions (each loop always runs at least one). The report says how many ran.
   */
  overBudget(): boolean;
  /** With --profile: the hub isolate's inspector (the profiler runs on it), for heap readings. */
  inspector?: Inspector;
}

export interface Scenario {
  name: string;
  title: string;
  /** Share of the full run's time budget, in seconds (setup included). */
  budgetS: number;
  /**
   * Run on a freshly started hub (new workerd, empty object storage, same database), so memory
   * figures start from a clean process rather than from what earlier scenarios left in it.
   */
  freshHub?: boolean;
  /** With --profile, the scenario profiles the part that matters itself (through `ctx.inspector`). */
  profilesItself?: boolean;
  run(ctx: ScenarioContext): Promise<ScenarioResult>;
}
