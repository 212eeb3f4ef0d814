export * from './codes';
export * from './envelope';
export * from './catalog';
export * from './sequencing';
export * from './queues';
export * from './operator-version';
export * from './frames';
export * from './frame-size';
