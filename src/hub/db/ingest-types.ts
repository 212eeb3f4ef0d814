import type { Payload, ResyncKind } from '../../protocol';

// The batch one ingest statement applies: built from accepted frames by the session's batch
// builder (src/hub/session/ingest-batch.ts), shaped for the statement's parameters.

export type WithSeq<T> = T & { seq: number };

export interface OperationUpdate {
  operation_id: string;
  accepted: boolean;
  progressed: boolean;
  outcome: string | null;
  message: string | null;
  /** The seq of the result that set `outcome`: the first concluding frame wins, an error's included. */
  outcome_seq: number | null;
}

export interface OperationEvent {
  operation_id: string | null;
  /** For an `error` replying to an operation.start: resolved to the operation by its start frame id. */
  reply_to: string | null;
  frame_id: string;
  kind: 'accepted' | 'progress' | 'result' | 'error';
  phase: string | null;
  message: string;
  seq: number;
}

export interface Rejection {
  seq: number;
  frame_id: string | null;
  type: string;
  reason: string;
  /** False when the frame was already answered on arrival (an unknown type). */
  answer: boolean;
}

/** The operator refused a deployment.desired: an error replying to that frame. */
export interface DesiredRefusal {
  deployment_id: string;
  revision: number;
  code: string;
  message: string;
  seq: number;
}


export interface Prune {
  kind: ResyncKind;
  begin_seq: number;
}

export interface IngestBatch {
  cluster: WithSeq<Payload<'cluster.observed'>> | null;
  nodes: WithSeq<Payload<'node.observed'>>[];
  nodeDeletes: string[];
  devices: WithSeq<Payload<'device.observed'>>[];
  deviceDeletes: string[];
  deployments: WithSeq<Payload<'deployment.observed'>>[];
  deploymentDeletes: string[];
  events: {
    frame_id: string;
    kind: string;
    subject: string;
    reason: string;
    message: string;
    severity: string;
    occurred_at: string;
    seq: number;
  }[];
  linkStats: Payload<'link.stats'> | null;
  operationUpdates: OperationUpdate[];
  operationEvents: OperationEvent[];
  rejections: Rejection[];
  desiredRefusals: DesiredRefusal[];
  prunes: Prune[];
}


export interface SessionFence {
  clusterUid: string;
  sessionId: string;
  generation: number;
  tokenHash: string;
  /**
   * How many ingest statements of this session the session object knows committed
   * (`cluster_owners.ingest_commits`); an ingest statement finding fewer in the database writes
   * nothing (it went back). Absent: 0, nothing to check.
   */
  ingestCommits?: number;
}

export interface IngestResult {
  /** False: this session no longer owns the cluster (or it was disabled or its token rotated); nothing was written. */
  fenced: boolean;
  /**
   * The database holds fewer of this session's ingest statements than the session knows committed:
   * it went back (restored from a backup). Nothing was written (`fenced` is false too).
   */
  wentBack?: true;
  /** The owner row's count of this session's committed ingest statements, this one included. */
  commits?: number;
  pruned: number;
  /** operation.* frames naming an operation this cluster does not have: recorded as rejections. */
  unknownOperations: { seq: number; frame_id: string; type: string; reason: string }[];
  /**
   * Of those, the ones this statement recorded: a frame applied past a hole is applied again by
   * the replay after a resume, and its rejection is already there. Absent when the statement
   * carried no such frame (a lean one).
   */
  unknownOperationsRecorded?: number;
  /**
   * The batch's refusals of desired state this statement counted: a replayed one was counted
   * when first applied. Absent when the statement carried none (a lean one).
   */
  desiredRefusalsCounted?: number;
}
