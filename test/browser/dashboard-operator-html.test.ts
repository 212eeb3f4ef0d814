/**
 * Operator-controlled text that looks like HTML is shown as text, never parsed as markup,
 * in the fleet view and in the cluster view. README, Dashboard, Security: "The page builds its DOM
 * with the DOM API, never from HTML strings." An operator (or anyone holding one cluster's
 * enrollment token) chooses its region, Kubernetes version, labels, node names, GPU models,
 * deployment messages and event texts. Each payload carries a `data-xss` attribute: any element
 * that has it was made by parsing the operator's text as HTML. (The CSP would block an inline
 * handler's script, so the test looks for the element, not for a script having run.)
 */
import { afterEach, describe, expect, it } from 'vitest';
import { desired, device, useHub, type Peer } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();
const peers: Peer[] = [];
afterEach(() => {
  for (const p of peers.splice(0)) p.close();
});

const tag = (where: string) => `<img data-xss="${where}" src="x"><b data-xss="${where}">${where}</b>`;

describe('operator text that looks like HTML', () => {
  it('is shown as text in the fleet view and the cluster view; no element is made from it', async () => {
    const c = await h.newCluster('htmlish');
    const put = await h.admin('PUT', `/clusters/${c.uid}/deployments/d1`, desired());
    expect(put.status).toBe(200);
    const { peer } = await h.openFresh(c);
    peers.push(peer);
    peer.send('cluster.observed', { kubernetes_version: tag('k8s'), provider: tag('provider'), region: tag('region'), labels: { team: tag('label') } });
    peer.send('node.observed', { node_id: 'n1', name: tag('node'), ready: false, schedulable: true, labels: { l: tag('nodelabel') }, taints: [], allocatable: { gpus: 8, cpu_millis: 64000, memory_mb: 512000 } });
    peer.send('device.observed', device('g1', { model: tag('gpu'), health: 'unhealthy', driver_version: tag('driver') }));
    peer.send('deployment.observed', { deployment_id: 'd1', observed_revision: put.json.revision ?? null, phase: 'failed', ready_replicas: 0, replica_ids: ['d1-r1'], message: tag('depmsg') });
    peer.send('node.event', { subject: 'n1', reason: tag('reason'), message: tag('evmsg'), severity: 'warning', occurred_at: new Date().toISOString() });
    await peer.ackedThrough(peer.nextSeq - 1);

    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors);
    await page.getByRole('rowheader', { name: c.name, exact: true }).waitFor({ timeout: 30_000 });
    await expect.poll(() => page.locator('#view').innerText(), { timeout: 10_000 }).toContain('<b data-xss="region">');
    expect(await page.locator('[data-xss]').count(), 'elements parsed from operator text in the fleet view').toBe(0);

    await page.goto(`${h.hub.url}/#/clusters/${c.name}`);
    await expect.poll(() => page.locator('#view').innerText(), { timeout: 15_000 }).toContain('<b data-xss="depmsg">');
    const text = await page.locator('#view').innerText();
    for (const where of ['region', 'node', 'evmsg', 'depmsg']) expect(text, where).toContain(`<b data-xss="${where}">`);
    expect(await page.locator('[data-xss]').count(), 'elements parsed from operator text in the cluster view').toBe(0);
    expect(errors).toEqual([]);
  }, 90_000);
});
