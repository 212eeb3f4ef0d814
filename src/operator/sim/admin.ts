import { z } from 'zod';

const CreatedCluster = z.object({ uid: z.string().min(1), name: z.string().min(1), enrollment_token: z.string().min(1) });
export type CreatedCluster = z.infer<typeof CreatedCluster>;

/** The hub's HTTP base from whatever URL the operator was given (ws → http, path dropped). */
export function httpBase(url: string): string {
  const u = new URL(url);
  if (u.protocol === 'ws:') u.protocol = 'http:';
  if (u.protocol === 'wss:') u.protocol = 'https:';
  return `${u.protocol}//${u.host}`;
}

/** `POST /admin/clusters {"name"}` → the new cluster and its enrollment token (shown once). */
export async function createCluster(hubUrl: string, adminToken: string, name: string): Promise<CreatedCluster> {
  const res = await fetch(`${httpBase(hubUrl)}/admin/clusters`, {
    method: 'POST',
    headers: { authorization: `Bearer ${adminToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name }),
  });
  const text = await res.text();
  if (res.status !== 201) throw new Error(`POST /admin/clusters answered ${res.status}: ${text.slice(0, 500)}`);
  const parsed = CreatedCluster.safeParse(JSON.parse(text));
  if (!parsed.success) throw new Error(`POST /admin/clusters answered an unexpected body: ${text.slice(0, 500)}`);
  return parsed.data;
}
