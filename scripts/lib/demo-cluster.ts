/**
 * The demo cluster `npm start` guarantees, through the hub's own admin API (so it exercises the
 * same path a user would, and depends on no table layout).
 *
 * Enrollment tokens are shown once and stored as a hash, so a restart cannot read the old one
 * back. We keep it in the state directory together with the cluster's uid and `token_issued_at`
 * at issue time, and reuse it while both still match what the admin API reports: the printed
 * token and any simulator already using it survive a hub restart. A rotation by anyone else, a
 * recreated cluster (another uid) or a lost file gets a fresh token by rotation.
 *
 * The time kept is the one the create or rotate answered with its token, not one read back by a
 * GET after it: a rotation by someone else in between would pair this (dead) token with the live
 * one's time, and every later start would reuse the dead token.
 */
import { readDemoToken, writeDemoToken, type StatePaths } from './start-state';

export const DEMO_CLUSTER_NAME = 'demo';

export interface DemoCluster {
  uid: string;
  name: string;
  token: string;
  disabled: boolean;
  /** What this start had to do to get a usable token. */
  action: 'created' | 'reused' | 'rotated';
}

interface ClusterView {
  uid: string;
  name: string;
  token_issued_at: string;
  disabled: boolean;
}

export class AdminApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

async function call<T>(hubUrl: string, adminToken: string, method: string, path: string, body?: unknown): Promise<{ status: number; json: T }> {
  const res = await fetch(new URL(path, hubUrl), {
    method,
    headers: { authorization: `Bearer ${adminToken}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    // The first admin request after a cold start also opens the hub's first database connection.
    signal: AbortSignal.timeout(20_000),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // Left null: reported below with the status.
  }
  if (res.status >= 400 && res.status !== 404 && res.status !== 409) {
    const detail = (json as { error?: { message?: string } } | null)?.error?.message ?? text.slice(0, 200);
    throw new AdminApiError(res.status, `admin API ${method} ${path} answered ${res.status}: ${detail}`);
  }
  return { status: res.status, json: json as T };
}

async function getView(hubUrl: string, adminToken: string, name: string): Promise<ClusterView | null> {
  const { status, json } = await call<ClusterView>(hubUrl, adminToken, 'GET', `/admin/clusters/${name}`);
  return status === 404 ? null : json;
}

export async function ensureDemoCluster(hubUrl: string, adminToken: string, paths: StatePaths, name: string = DEMO_CLUSTER_NAME): Promise<DemoCluster> {
  // Two passes at most: a 409 on create means another client registered it in between.
  for (let pass = 0; pass < 2; pass++) {
    let view = await getView(hubUrl, adminToken, name);
    if (!view) {
      const created = await call<{ uid: string; name: string; enrollment_token: string; token_issued_at: string }>(hubUrl, adminToken, 'POST', '/admin/clusters', { name });
      if (created.status === 409) continue;
      view = await getView(hubUrl, adminToken, name);
      if (!view) throw new Error(`the ${name} cluster vanished right after it was created`);
      await writeDemoToken(paths, { uid: created.json.uid, token: created.json.enrollment_token, token_issued_at: created.json.token_issued_at });
      return { uid: view.uid, name: view.name, token: created.json.enrollment_token, disabled: view.disabled, action: 'created' };
    }

    const stored = await readDemoToken(paths);
    if (stored && stored.uid === view.uid && stored.token_issued_at === view.token_issued_at) {
      return { uid: view.uid, name: view.name, token: stored.token, disabled: view.disabled, action: 'reused' };
    }

    const rotated = await call<{ enrollment_token: string; token_issued_at: string }>(hubUrl, adminToken, 'POST', `/admin/clusters/${view.uid}/rotate-token`);
    if (rotated.status === 404) continue;
    const after = await getView(hubUrl, adminToken, view.uid);
    if (!after) throw new Error(`the ${name} cluster vanished right after its token was rotated`);
    await writeDemoToken(paths, { uid: view.uid, token: rotated.json.enrollment_token, token_issued_at: rotated.json.token_issued_at });
    return { uid: after.uid, name: after.name, token: rotated.json.enrollment_token, disabled: after.disabled, action: 'rotated' };
  }
  throw new Error(`the ${name} cluster kept changing under us; is another client creating and deleting it?`);
}
