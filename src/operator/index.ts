/**
 * The Wingsmith operator SDK: one cluster's side of the plane–operator link.
 * Start with `OperatorClient` (client.ts); storage choices are in cursor-store.ts and
 * outbound-log.ts, handler outcomes in handlers.ts.
 */
export { OperatorClient } from './client';
export type { ClientEvents, ClientState, ClientStats, Limits, OperatorClientOptions, RefusedEvent, SessionView } from './client';
export { applied, permanent, PermanentError, transient } from './handlers';
export type { FrameContext, HandlerResult, OperationConclusion, OperationContext, OperatorHandlers } from './handlers';
export { CorruptCursorStoreError, FileCursorStore, MemoryCursorStore, emptyRecord } from './cursor-store';
export type { CursorStore, DurableRecord, OperationRecord } from './cursor-store';
export { FileOutboundLog, MemoryOutboundLog, recoverLog } from './outbound-log';
export type { LogRecovery, OutboundLog } from './outbound-log';
export type { ObservedSnapshot } from './resync';
export type { HeldStorage } from './storage-watch';
export type { RefusalError, RefusalKind } from './refusal';
export { Backoff, DEFAULT_BACKOFF } from './backoff';
export type { BackoffPolicy } from './backoff';
export { jsonLogger, memoryLogger, silentLogger, makeLogger } from './logger';
export type { Logger, LogFields, LogLevel, LogRecord } from './logger';
export { systemTimers } from './timers';
export type { Timers } from './timers';
export { connectUrl } from './transport';
export type { Dialer, DialRequest, Transport, TransportEvents } from './transport';
export { wsDialer } from './ws-transport';
export { openFileStores, type FileStoresOptions } from './file-stores';
export { DEFAULT_LOCK_STALE_MS, StateDirLockedError, StateDirLostError, type StateLockOptions } from './state-lock';
