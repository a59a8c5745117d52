/** cluster-key-slot (ioredis's own slot function, the package it depends on): Redis Cluster's CRC16 slot of a key,
 * its hash tag honoured. It ships no types. */
declare module 'cluster-key-slot' {
  export default function calculateSlot(key: string): number;
}
