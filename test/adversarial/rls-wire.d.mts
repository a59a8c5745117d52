/** The types of rls-wire.mjs (a plain .mjs file: the attacks and the Envoy emulator run it as processes of their own). */
import type { ClientHttp2Session } from 'node:http2';

export const RLS_PATH: string;
export const GRPC: Record<string, string>;
export const OK: number;
export function descriptor(entries: [string, string][], hits?: number, negative?: boolean): Buffer;
export function rlsMessage(domain: string, descriptors: Buffer[]): Buffer;
export interface Answer {
  overall: number;
  statuses: { code: number; remaining: number }[];
}
export function readAnswer(buf: Buffer): Answer;
export function unary(s: ClientHttp2Session, framed: Buffer, headers?: Record<string, string>): Promise<{ status: string; answer?: Answer }>;
export function connect(port: number, address?: string): Promise<ClientHttp2Session | undefined>;
