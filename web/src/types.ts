// The API's answers, as far as the pages read them (docs/openapi.yaml has them all).
export interface Report {
  scope: string;
  from: number;
  to: number;
  // With ?step=: the report of each step of the period (without steps of its own).
  step?: number;
  steps?: Report[];
  availability: { value: number | null };
  occupancy: { value: number | null; allocated: number | null; unallocated: number | null };
  impact: { mean: number | null; min: number | null; min_budget?: string };
  utilization: { value: number | null; jobs_measured: number };
  budgets: {
    budget: string; owed_gpu_seconds: number; allocated_gpu_seconds: number;
    unallocated_gpu_seconds: number; delivered_fraction: number | null; impact: number | null;
    share_gpu_seconds: number; demand_gpu_seconds: number;
  }[];
}
export interface ByModel {
  cluster: string; model: string; allocated: number; unallocated: number; idle: number;
  draining: number; down: number;
}
export interface Gpu { index: number; state: string; jobs: number[]; other_jobs?: number }
export interface GpuTelemetry { index: number; util_pct?: number }
export interface NodeView {
  name: string; cluster: string; model: string; health: string; health_reason?: string;
  cordoned?: boolean; draining?: boolean; busy_gpus: number; drain_eta?: number; gpus: Gpu[];
  telemetry?: { time: number; gpus: GpuTelemetry[] };
}
export interface Gpus {
  time: number;
  by_model: ByModel[];
  clusters?: { name: string; free_gpus: number; largest_waiting_per_node: number;
    fragmented_gpus: number }[];
  budgets: Record<string, { allocated_milli: number; unallocated_milli: number }>;
  nodes: NodeView[];
}
export interface QueueJob {
  id: number; name: string; owner: string; budget: string; kind: string; nodes: number;
  gpus_per_node: number; submit_time: number; code: string; explanation: string;
  rank?: number; expected_start?: number;
}
export interface Queue {
  time: number; waiting: number; truncated?: boolean; by_reason: Record<string, number>;
  jobs: QueueJob[];
}
export interface JobSpec {
  kind?: string; nodes: number; gpus_per_node: number; gpu_milli?: number; models?: string[];
  clusters?: string[]; command?: string[]; min_runtime?: number; priority?: number;
  resumable?: boolean; expected_duration?: number;
}
export interface Job {
  id: number; name: string; state: string; reason: string; owner: string; budget: string;
  submit_time: number; runs: number; allocated: boolean; protected_until: number;
  run_start: number; spec: JobSpec; placement?: { node: string; gpu: number }[];
}
export interface Jobs { jobs: Job[]; next?: number | null }
export interface Budget {
  path: string; depth: number; share: number; fraction: Record<string, number>;
  members?: string[]; owners?: string[];
}
export interface Budgets { budgets: Budget[] }
