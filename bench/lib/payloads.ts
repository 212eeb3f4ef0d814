/** Observed-state payloads shaped like the fixtures, with distinct subjects. */
import type { Payload } from '../../src/protocol';

export function device(i: number, nodes = 1_000): Payload<'device.observed'> {
  return {
    device_id: `GPU-${i.toString(16).padStart(8, '0')}-3b5d-4e7f-9a0b-1c2d3e4f5a6b`,
    node_id: `node-${(i % nodes).toString().padStart(5, '0')}`,
    vendor: 'nvidia',
    model: 'NVIDIA A100-SXM4-80GB',
    memory_total_mb: 81920,
    health: 'healthy',
    driver_version: '550.54.15',
  };
}

export function node(i: number): Payload<'node.observed'> {
  const id = `node-${i.toString().padStart(5, '0')}`;
  return {
    node_id: id,
    name: id,
    ready: true,
    schedulable: true,
    labels: { 'nvidia.com/gpu.product': 'NVIDIA-A100-SXM4-80GB', 'topology.kubernetes.io/zone': 'us-east4-a' },
    taints: [{ key: 'nvidia.com/gpu', value: 'present', effect: 'NoSchedule' }],
    allocatable: { gpus: 8, cpu_millis: 94000, memory_mb: 1376256 },
  } as Payload<'node.observed'>;
}

export function deploymentObserved(i: number): Payload<'deployment.observed'> {
  const id = `dep-${i.toString().padStart(6, '0')}`;
  return {
    deployment_id: id,
    observed_revision: 1,
    phase: 'ready',
    ready_replicas: 2,
    replica_ids: [`${id}-a`, `${id}-b`],
    message: '',
  } as Payload<'deployment.observed'>;
}

/** A realistic serving configuration (the fixture's shape). */
export const SERVING = {
  engine: 'vllm',
  model: 'meta-llama/Llama-3.1-70B-Instruct',
  image: 'vllm/vllm-openai:v0.6.3',
  args: ['--tensor-parallel-size', '4', '--max-model-len', '8192'],
  env: { VLLM_LOGGING_LEVEL: 'INFO' },
  gpus_per_replica: 4,
  gpu_model: 'NVIDIA A100-SXM4-80GB',
  port: 8000,
};

/** One deployment's desired state as the desired scenario PUTs it. */
export const DESIRED_BODY = { workload_id: 'llama-70b-chat', min_replicas: 2, max_replicas: 4, serving: SERVING };

/** A bulk PUT's body: these deployments, each with that state. */
export const bulkDesiredBody = (ids: string[]) => ({ deployments: ids.map((deployment_id) => ({ deployment_id, ...DESIRED_BODY })) });
