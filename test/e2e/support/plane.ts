/**
 * The plane as a test drives it: the admin API over HTTP, and Postgres read directly. No vitest
 * in here (the soak script uses it too).
 */
import type { Client } from '@neondatabase/serverless';
import { pgClient } from '../../../scripts/lib/pg-node';
import type { Query } from './converge';

export interface Registered {
  uid: string;
  name: string;
  token: string;
}

export interface AdminResponse {
  status: number;
  json: unknown;
}

export interface DesiredBody {
  workload_id: string;
  min_replicas: number;
  max_replicas: number;
  serving: {
    engine: string;
    model: string;
    image: string;
    args: string[];
    env: Record<string, string>;
    gpus_per_replica: number;
    gpu_model: string | null;
    port: number;
  };
}

export function desiredBody(over: Partial<DesiredBody> & { image?: string } = {}): DesiredBody {
  const { image, ...rest } = over;
  return {
    workload_id: 'w-e2e',
    min_replicas: 1,
    max_replicas: 2,
    serving: {
      engine: 'vllm',
      model: 'meta-llama/Llama-3.1-8B-Instruct',
      image: image ?? 'vllm/vllm-openai:v0.6.3',
      args: ['--max-model-len', '8192'],
      env: { HF_HUB_OFFLINE: '1' },
      gpus_per_replica: 1,
      gpu_model: null,
      port: 8000,
    },
    ...rest,
  };
}

/** The admin API of one hub (the URL can move when the hub is restarted). */
export class Admin {
  constructor(
    public baseUrl: string,
    private readonly token: string,
  ) {}

  async call(method: string, path: string, body?: unknown): Promise<AdminResponse> {
    const res = await fetch(`${this.baseUrl}/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${this.token}`, 'content-type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    let json: unknown = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch {
      json = text;
    }
    return { status: res.status, json };
  }

  /**
   * Like `call`, but a status other than `expect` throws with the body. A 503 (the admin API's
   * "the database is unavailable; retry") is retried a few times first: the suites share one
   * Postgres server with everything else running on the machine, and a moment without a free
   * connection is not what they test.
   */
  async must(method: string, path: string, expect: number, body?: unknown): Promise<Record<string, unknown>> {
    let r = await this.call(method, path, body);
    for (let attempt = 0; r.status === 503 && attempt < 4; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 250 * 2 ** attempt));
      r = await this.call(method, path, body);
    }
    if (r.status !== expect) throw new Error(`${method} /admin${path}: ${r.status} ${JSON.stringify(r.json).slice(0, 400)}`);
    return (r.json ?? {}) as Record<string, unknown>;
  }

  async register(name: string): Promise<Registered> {
    const j = await this.must('POST', '/clusters', 201, { name });
    return { uid: String(j.uid), name: String(j.name), token: String(j.enrollment_token) };
  }

  putDesired(cluster: string, deploymentId: string, body: DesiredBody): Promise<Record<string, unknown>> {
    return this.must('PUT', `/clusters/${cluster}/deployments/${deploymentId}`, 200, body);
  }

  async deleteDesired(cluster: string, deploymentId: string): Promise<void> {
    const r = await this.call('DELETE', `/clusters/${cluster}/deployments/${deploymentId}`);
    if (r.status !== 200 && r.status !== 204 && r.status !== 404) throw new Error(`DELETE desired ${deploymentId}: ${r.status}`);
  }

  async startOperation(cluster: string, kind: string, target: string, deadlineS = 60, params: Record<string, string | number | boolean | null> = {}): Promise<string> {
    const j = await this.must('POST', `/clusters/${cluster}/operations`, 202, { kind, target, params, deadline_s: deadlineS });
    return String(j.operation_id);
  }

  async rotateToken(cluster: string): Promise<string> {
    const j = await this.must('POST', `/clusters/${cluster}/rotate-token`, 200);
    return String(j.enrollment_token);
  }

  async disable(cluster: string): Promise<void> {
    await this.must('POST', `/clusters/${cluster}/disable`, 200);
  }

  async enable(cluster: string): Promise<void> {
    await this.must('POST', `/clusters/${cluster}/enable`, 200);
  }
}

/**
 * One Postgres connection (through the run's WebSocket proxy, the driver the hub uses) reused for
 * every read; reopened on demand after an error, so a checker polling for seconds does not
 * open a connection per poll.
 */
export function openQuery(databaseUrl: string, proxyUrl: string): { query: Query; close(): Promise<void> } {
  let client: Promise<Client> | null = null;
  const connect = (): Promise<Client> => {
    client ??= (async () => {
      const c = pgClient(databaseUrl, proxyUrl);
      c.on('error', () => {
        client = null;
      });
      await c.connect();
      return c;
    })().catch((err: unknown) => {
      client = null;
      throw err;
    });
    return client;
  };
  const query: Query = async <R,>(text: string, params: unknown[] = []) => {
    const c = await connect();
    try {
      return (await c.query(text, params)).rows as R[];
    } catch (err) {
      // A broken connection is replaced on the next call; a bad statement just fails.
      if (!(err instanceof Error) || !/syntax|does not exist|violates/.test(err.message)) {
        client = null;
        void c.end().catch(() => undefined);
      }
      throw err;
    }
  };
  return {
    query,
    close: async () => {
      const c = client;
      client = null;
      if (c) await (await c.catch(() => null))?.end().catch(() => undefined);
    },
  };
}
