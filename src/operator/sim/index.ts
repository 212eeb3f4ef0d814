export { ClusterModel, type ClusterShape, type SimSink } from './model';
export { SimulatedCluster, type SimulatedClusterOptions } from './cluster';
export { createCluster, httpBase, type CreatedCluster } from './admin';
