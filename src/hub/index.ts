import { hubApp } from './app';

export { SessionObject } from './session/session-object';

export default hubApp();
