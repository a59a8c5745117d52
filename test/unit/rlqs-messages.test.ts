import { readFileSync } from 'node:fs';
import protobuf from 'protobufjs';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** src/rlqs/messages.ts against the protos it names: each interface marked `@proto <message>` is that message,
 * and each of its fields, commented `= <number>: <type as the proto writes it>`, is that field of it, with a
 * TypeScript type that carries it (string, number, Buffer, an array for repeated, a Record for a map, the
 * interface of its message, the names of its enum). The protos are loaded as test/helpers/envoy-rlqs.ts does. */

const FILE = 'src/rlqs/messages.ts';

const root = new protobuf.Root();
root.resolvePath = (_o, target) => (target.startsWith('google/') ? target : `proto/${target}`);
root.loadSync('envoy/service/rate_limit_quota/v3/rlqs.proto', { keepCase: true });
root.resolveAll();

const NUMBERS = new Set(['int32', 'int64', 'uint32', 'uint64', 'sint32', 'sint64', 'fixed32', 'fixed64', 'sfixed32', 'sfixed64', 'double', 'float']);

interface Declared {
  name: string;
  proto: string;
  node: ts.InterfaceDeclaration | ts.TypeAliasDeclaration;
}

const source = ts.createSourceFile(FILE, readFileSync(FILE, 'utf8'), ts.ScriptTarget.Latest, true);
const aliases = new Map<string, ts.TypeNode>();
const declared: Declared[] = [];
for (const node of source.statements) {
  if (!ts.isInterfaceDeclaration(node) && !ts.isTypeAliasDeclaration(node)) continue;
  if (ts.isTypeAliasDeclaration(node)) aliases.set(node.name.text, node.type);
  const tag = ts.getJSDocTags(node).find((t) => t.tagName.text === 'proto');
  const proto = typeof tag?.comment === 'string' ? tag.comment.split(/\s/)[0] : undefined;
  if (proto) declared.push({ name: node.name.text, proto, node });
}
const protoOf = new Map(declared.map((d) => [d.name, d.proto]));

/** The field's type as the proto writes it: `uint64`, `BucketId`, `repeated X`, `map<string, bytes>`. */
function written(field: protobuf.Field): string {
  if (field instanceof protobuf.MapField) return `map<${field.keyType}, ${field.type}>`;
  return field.repeated ? `repeated ${field.type}` : field.type;
}

/** Why a TypeScript type cannot carry a field's values, or undefined if it can. */
function mismatch(type: ts.TypeNode, field: protobuf.Field, repeated = field.repeated): string | undefined {
  if (ts.isUnionTypeNode(type)) {
    const kept = type.types.filter((t) => !(ts.isLiteralTypeNode(t) && t.literal.kind === ts.SyntaxKind.NullKeyword));
    if (kept.length === 1) return mismatch(kept[0]!, field, repeated);
    const names = kept.map((t) => (ts.isLiteralTypeNode(t) && ts.isStringLiteral(t.literal) ? t.literal.text : undefined));
    const values = field.resolvedType instanceof protobuf.Enum ? field.resolvedType.values : undefined;
    return values && names.every((n) => n !== undefined && n in values) ? undefined : `${type.getText(source)} is not the names of ${field.type}`;
  }
  if (ts.isArrayTypeNode(type)) return repeated ? mismatch(type.elementType, field, false) : `${field.name} is not repeated`;
  if (repeated) return `${field.name} is repeated`;
  const text = type.getText(source);
  if (ts.isTypeReferenceNode(type) && aliases.has(text) && !protoOf.has(text)) return mismatch(aliases.get(text)!, field, repeated);
  if (field instanceof protobuf.MapField) {
    return text === `Record<${field.keyType}, ${field.type === 'bytes' ? 'Buffer' : field.type}>` ? undefined : `${text} is not ${written(field)}`;
  }
  if (protoOf.has(text)) {
    const full = field.resolvedType?.fullName;
    return full === `.${protoOf.get(text)}` ? undefined : `${text} is ${protoOf.get(text)}, the field is ${full}`;
  }
  const ok = (text === 'string' && field.type === 'string') || (text === 'number' && NUMBERS.has(field.type)) || (text === 'Buffer' && field.type === 'bytes');
  return ok ? undefined : `${text} does not carry ${field.type}`;
}

describe('the RLQS wire messages (src/rlqs/messages.ts) against the protos', () => {
  it('reads the declarations: the report, the response and what they hold', () => {
    const names = declared.map((d) => d.proto.split('.').at(-1));
    for (const name of ['RateLimitQuotaUsageReports', 'BucketQuotaUsage', 'BucketId', 'RateLimitQuotaResponse', 'BucketAction']) expect(names).toContain(name);
    for (const name of ['QuotaAssignmentAction', 'AbandonAction', 'RateLimitStrategy', 'TokenBucket', 'Duration']) expect(names).toContain(name);
  });

  it.each(declared.map((d) => [d.name, d] as const))('%s is its message, field by field', (_name, d) => {
    const message = root.lookupType(d.proto);
    if (ts.isTypeAliasDeclaration(d.node)) {
      // A message with no fields, written as such (AbandonAction).
      expect(d.node.type.getText(source)).toBe('Record<string, never>');
      expect(message.fieldsArray).toEqual([]);
      return;
    }
    const problems: string[] = [];
    for (const member of d.node.members) {
      if (!ts.isPropertySignature(member) || !member.type) continue;
      const name = member.name.getText(source);
      const doc = ts
        .getJSDocCommentsAndTags(member)
        .map((c) => c.getText(source))
        .join(' ');
      const comment = /= (\d+): ([^*]+?)\s*\*\//.exec(doc);
      const field = message.fields[name];
      if (!field) problems.push(`${name}: no such field in ${d.proto}`);
      else if (!comment) problems.push(`${name}: no "= number: type" comment`);
      else {
        if (Number(comment[1]) !== field.id) problems.push(`${name}: = ${comment[1]} in the comment, = ${field.id} in the proto`);
        if (comment[2] !== written(field)) problems.push(`${name}: ${comment[2]} in the comment, ${written(field)} in the proto`);
        const why = mismatch(member.type, field);
        if (why) problems.push(`${name}: ${why}`);
      }
    }
    expect(problems).toEqual([]);
  });
});
