import { hubApp } from './app';

export { DbGateway } from './db/gateway';
export { SessionObject } from './session/session-object';

export default hubApp();
