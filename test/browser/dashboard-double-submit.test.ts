/**
 * The dashboard's write forms against a double submit (a double click, or Enter pressed twice):
 * one request per submit that is being answered. Before, a second register answered "already
 * exists" beside the enrollment token the first had just issued, and a second PUT wrote a second
 * revision and sent the operator the change twice. (Starting an operation was already safe: both
 * requests carry one idempotency key.) And a refusal names a field inside one of the form's
 * boxes (an env entry): its message goes on that box.
 */
import type { Request } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { useHub } from '../hub/support/hub';
import { signedIn, useBrowser } from './support/signed-in';

const h = useHub();
const browser = useBrowser();

describe('write forms under a double click', () => {
  it('Register sends one POST and shows no error beside the token it issued', async () => {
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors);
    const posts: Request[] = [];
    page.on('request', (r) => {
      if (r.method() === 'POST' && new URL(r.url()).pathname === '/admin/clusters') posts.push(r);
    });
    const name = `dbl-${Date.now().toString(36)}`;
    await page.getByLabel('Name', { exact: true }).last().waitFor({ timeout: 30_000 });
    await page.locator('#register-name').fill(name);
    await page.getByRole('button', { name: 'Register' }).dblclick();
    await page.getByRole('region', { name: `Enrollment token for ${name}` }).waitFor({ timeout: 15_000 });
    await new Promise((r) => setTimeout(r, 1_500));
    const formError = await page.locator('form[aria-labelledby="register-h"] .form-error').innerText();
    const fieldErrors = await page.locator('form[aria-labelledby="register-h"] .field-error').count();
    expect({ posts: posts.length, formError, fieldErrors }).toEqual({ posts: 1, formError: '', fieldErrors: 0 });
  }, 90_000);

  it('Put deployment sends one PUT: one new revision', async () => {
    const c = await h.newCluster('dblput');
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    const puts: Request[] = [];
    page.on('request', (r) => {
      if (r.method() === 'PUT' && new URL(r.url()).pathname.includes('/deployments/')) puts.push(r);
    });
    await page.locator('#dep-deployment_id').waitFor({ timeout: 30_000 });
    await page.locator('#dep-deployment_id').fill('d1');
    await page.locator('#dep-workload_id').fill('w1');
    await page.locator('#dep-model').fill('m');
    await page.locator('#dep-image').fill('img:1');
    await page.getByRole('button', { name: 'Put deployment' }).dblclick();
    await new Promise((r) => setTimeout(r, 2_000));
    const got = await h.admin('GET', `/clusters/${c.uid}/deployments?limit=10`);
    const revision = got.json.items?.[0]?.desired?.revision;
    expect({ puts: puts.length, revision }).toEqual({ puts: 1, revision: 1 });
  }, 90_000);
});

describe('write forms: the field the API names', () => {
  it('a PUT refused on one env entry (serving.env.<KEY>) shows the message on the Environment field, as README promises for the field the API names', async () => {
    const c = await h.newCluster('rvenv');
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    await page.locator('#dep-deployment_id').waitFor({ timeout: 30_000 });
    await page.locator('#dep-deployment_id').fill('d1');
    await page.locator('#dep-workload_id').fill('w1');
    await page.locator('#dep-model').fill('m');
    await page.locator('#dep-image').fill('img:1');
    await page.locator('#dep-env').fill('1BAD=x');
    const answered = page.waitForResponse((r) => r.request().method() === 'PUT' && r.url().includes('/deployments/d1'));
    await page.getByRole('button', { name: 'Put deployment' }).click();
    const res = await answered;
    const body = await res.json();
    // The API names the field (serving.env.1BAD): the form's Environment field.
    expect(res.status()).toBe(400);
    expect(String(body.error.field)).toMatch(/^serving\.env/);
    await expect.poll(() => page.locator('#dep-env').getAttribute('aria-invalid'), { timeout: 5_000 }).toBe('true');
    expect(await page.locator('#dep-env-error').innerText()).toContain('serving.env.1BAD');
    expect(errors).toEqual([]);
  }, 90_000);
});

describe('write forms: a field left empty', () => {
  it('Put deployment with no deployment id says so on the Deployment id field, as every other field error is shown', async () => {
    const c = await h.newCluster('rvnoid');
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    await page.locator('#dep-deployment_id').waitFor({ timeout: 30_000 });
    await page.locator('#dep-workload_id').fill('w1');
    await page.getByRole('button', { name: 'Put deployment' }).click();
    await expect.poll(() => page.locator('#dep-deployment_id').getAttribute('aria-invalid'), { timeout: 5_000 }).toBe('true');
    expect(await page.locator('#dep-deployment_id-error').innerText()).toBe('deployment_id: required');
    expect(await page.locator('form[aria-labelledby="dep-h"] .form-error').innerText()).toBe('deployment_id: required');
    expect(errors).toEqual([]);
  }, 90_000);
});

describe('write forms: editing a deployment', () => {
  it('Edit then Put, with only the replicas changed, writes back the args and env it read unchanged (an empty arg, a value with spaces or a newline)', async () => {
    const c = await h.newCluster('rvedit');
    const serving = {
      engine: 'vllm',
      model: 'm',
      image: 'img:1',
      args: ['--chat-template', '', '  padded  ', 'two\nlines'],
      env: { GREETING: ' hello ', MULTI: 'a\nB=c', EQ: 'x=y' },
      gpus_per_replica: 1,
      gpu_model: null,
      port: 8000,
    };
    const put = await h.admin('PUT', `/clusters/${c.uid}/deployments/d1`, { workload_id: 'w1', min_replicas: 1, max_replicas: 1, serving });
    expect(put.status).toBe(200);
    const errors: string[] = [];
    const page = await signedIn(browser(), h, errors, `#/clusters/${c.name}`);
    await page.getByRole('button', { name: 'Edit d1' }).click({ timeout: 30_000 });
    await page.locator('#dep-max_replicas').fill('3');
    const answered = page.waitForResponse((r) => r.request().method() === 'PUT' && r.url().includes('/deployments/d1'));
    await page.getByRole('button', { name: 'Put deployment' }).click();
    expect((await answered).status()).toBe(200);
    const got = await h.admin('GET', `/clusters/${c.uid}/deployments?limit=10`);
    const want = got.json.items?.[0]?.desired;
    expect({ max: want?.max_replicas, args: want?.serving?.args, env: want?.serving?.env }).toEqual({ max: 3, args: serving.args, env: serving.env });
    expect(errors).toEqual([]);
  }, 90_000);
});
