/**
 * The dashboard's files, bundled into the Worker as text (wrangler.toml `[[rules]]`, type Text,
 * for `dashboard/static/`). The specifiers name the `dashboard/static/` directory in full because
 * wrangler matches its rules against the specifier as written. A file added to ./static must be
 * listed here too; the hub test that serves every file fails until it is.
 */
import indexHtml from '../dashboard/static/index.html';
import appCss from '../dashboard/static/app.css';
import apiJs from '../dashboard/static/api.js';
import appJs from '../dashboard/static/app.js';
import chartsJs from '../dashboard/static/charts.js';
import clusterJs from '../dashboard/static/cluster.js';
import domJs from '../dashboard/static/dom.js';
import fleetJs from '../dashboard/static/fleet.js';
import formsJs from '../dashboard/static/forms.js';
import uiJs from '../dashboard/static/ui.js';

export interface DashboardFile {
  body: string;
  type: string;
}

const js = (body: string): DashboardFile => ({ body, type: 'text/javascript; charset=utf-8' });

/** The page, served at `/` only. */
export const PAGE: DashboardFile = { body: indexHtml, type: 'text/html; charset=utf-8' };

/** The page's script and style, served at `/dashboard/<name>`. */
export const FILES: ReadonlyMap<string, DashboardFile> = new Map([
  ['app.css', { body: appCss, type: 'text/css; charset=utf-8' }],
  ['api.js', js(apiJs)],
  ['app.js', js(appJs)],
  ['charts.js', js(chartsJs)],
  ['cluster.js', js(clusterJs)],
  ['dom.js', js(domJs)],
  ['fleet.js', js(fleetJs)],
  ['forms.js', js(formsJs)],
  ['ui.js', js(uiJs)],
]);
