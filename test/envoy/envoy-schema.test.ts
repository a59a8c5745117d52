import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { checkEnvoyYaml, EnvoyApi } from './proto-schema.js';

// Every YAML file Tollgate ships for Envoy, checked against Envoy's own API protos as Envoy reads it. No
// Envoy binary runs here: this is the closest thing to `envoy --mode validate`, and the fixtures below prove
// the checker rejects each kind of mistake, on the right line. envoy/envoy-rlqs.yaml (the rate_limit_quota
// filter instead of RLS) is checked on its own, as it has none of the RLS fields the shipped files must have.

const api = new EnvoyApi();
const SHIPPED = ['envoy/envoy.yaml', 'deploy/kubernetes/sidecar/envoy.yaml', 'deploy/kubernetes/central/envoy.yaml'];
const FIXTURES = 'test/fixtures/envoy';

describe('shipped Envoy configs', () => {
  it.each(SHIPPED)('%s is valid for Envoy v3 API: no unknown field, bad type, deprecation or missing cluster', (file) => {
    const report = checkEnvoyYaml(readFileSync(file, 'utf8'), api);
    expect(report.problems).toEqual([]);
    // The walk reached every part that matters (a checker that stopped early would also report nothing).
    for (const field of [
      'envoy.config.bootstrap.v3.Bootstrap.static_resources',
      'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.use_remote_address',
      'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.internal_address_config',
      'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.normalize_path',
      'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.path_with_escaped_slashes_action',
      'envoy.config.route.v3.RouteMatch.case_sensitive',
      'envoy.config.route.v3.RateLimit.Action.request_headers',
      'envoy.extensions.filters.http.ratelimit.v3.RateLimit.timeout',
      'envoy.config.core.v3.GrpcService.EnvoyGrpc.cluster_name',
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions.explicit_http_config',
      'envoy.extensions.filters.http.router.v3.Router (@type)',
    ]) {
      expect(report.fieldsSeen, field).toContain(field);
    }
  });

  it('envoy/envoy-rlqs.yaml (the rate_limit_quota filter) is valid too, into every matcher input and action', () => {
    const report = checkEnvoyYaml(readFileSync('envoy/envoy-rlqs.yaml', 'utf8'), api);
    expect(report.problems).toEqual([]);
    const quota = 'envoy.extensions.filters.http.rate_limit_quota.v3';
    const matcher = 'xds.type.matcher.v3.Matcher';
    for (const field of [
      'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager.normalize_path',
      `${quota}.RateLimitQuotaFilterConfig.domain`,
      `${quota}.RateLimitQuotaFilterConfig.rlqs_server`,
      'envoy.config.core.v3.GrpcService.EnvoyGrpc.cluster_name',
      `${quota}.RateLimitQuotaFilterConfig.bucket_matchers`,
      `${matcher}.matcher_list`,
      `${matcher}.MatcherList.Predicate.and_matcher`,
      `${matcher}.MatcherList.Predicate.or_matcher`,
      `${matcher}.MatcherList.Predicate.not_matcher`,
      `${matcher}.MatcherList.Predicate.SinglePredicate.input`,
      `${matcher}.MatcherList.Predicate.SinglePredicate.value_match`,
      'xds.core.v3.TypedExtensionConfig.typed_config',
      'envoy.type.matcher.v3.HttpRequestHeaderMatchInput.header_name',
      'xds.type.matcher.v3.StringMatcher.ignore_case',
      'xds.type.matcher.v3.RegexMatcher.google_re2',
      `${matcher}.OnMatch.action`,
      `${quota}.RateLimitQuotaBucketSettings (@type)`,
      `${quota}.RateLimitQuotaBucketSettings.bucket_id_builder`,
      `${quota}.RateLimitQuotaBucketSettings.BucketIdBuilder.bucket_id_builder`,
      `${quota}.RateLimitQuotaBucketSettings.BucketIdBuilder.ValueBuilder.string_value`,
      `${quota}.RateLimitQuotaBucketSettings.BucketIdBuilder.ValueBuilder.custom_value`,
      `${quota}.RateLimitQuotaBucketSettings.reporting_interval`,
      `${quota}.RateLimitQuotaBucketSettings.DenyResponseSettings.response_headers_to_add`,
      `${quota}.RateLimitQuotaBucketSettings.NoAssignmentBehavior.fallback_rate_limit`,
      'envoy.type.v3.RateLimitStrategy.blanket_rule',
    ]) {
      expect(report.fieldsSeen, field).toContain(field);
    }
    // The RLS filter is gone, not left beside the new one.
    expect([...report.fieldsSeen].filter((f) => f.startsWith('envoy.extensions.filters.http.ratelimit.'))).toEqual([]);
  });

  it('envoy/envoy-llm.yaml (charges on stream done, Envoy 1.33+) is valid against the 1.33 API, and only there', () => {
    const text = readFileSync('envoy/envoy-llm.yaml', 'utf8');
    const report = checkEnvoyYaml(text, new EnvoyApi({ envoy133: true }));
    expect(report.problems).toEqual([]);
    for (const field of [
      'envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute (@type)',
      'envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute.rate_limits',
      'envoy.config.route.v3.RateLimit.hits_addend',
      'envoy.config.route.v3.RateLimit.HitsAddend.number',
      'envoy.config.route.v3.RateLimit.HitsAddend.format',
      'envoy.config.route.v3.RateLimit.apply_on_stream_done',
      'envoy.config.route.v3.RateLimit.Action.request_headers',
      'envoy.extensions.filters.http.ratelimit.v3.RateLimit.domain',
    ]) {
      expect(report.fieldsSeen, field).toContain(field);
    }
    // The checker is not blind to the new fields: the API before 1.33 refuses them.
    expect(checkEnvoyYaml(text, api).problems.map((p) => p.message)).toContainEqual(expect.stringMatching(/unknown field "hits_addend"/));
    expect(checkEnvoyYaml(text.replace('apply_on_stream_done: true', 'apply_on_stream_dne: true'), new EnvoyApi({ envoy133: true })).problems).toHaveLength(1);
  });

  it('envoy/envoy-inflight.yaml (slots given back on stream done, Envoy 1.38+) is valid against the 1.38 API, and only there', () => {
    const text = readFileSync('envoy/envoy-inflight.yaml', 'utf8');
    const report = checkEnvoyYaml(text, new EnvoyApi({ envoy138: true }));
    expect(report.problems).toEqual([]);
    for (const field of [
      'envoy.extensions.filters.http.ratelimit.v3.RateLimitPerRoute.rate_limits',
      'envoy.config.route.v3.RateLimit.HitsAddend.number',
      'envoy.config.route.v3.RateLimit.HitsAddend.is_negative_hits',
      'envoy.config.route.v3.RateLimit.apply_on_stream_done',
      'envoy.config.route.v3.RateLimit.Action.request_headers',
      'envoy.extensions.filters.http.ratelimit.v3.RateLimit.domain',
    ]) {
      expect(report.fieldsSeen, field).toContain(field);
    }
    // The API of 1.33 (before the refund) refuses it, on the new field.
    expect(checkEnvoyYaml(text, new EnvoyApi({ envoy133: true })).problems.map((p) => p.message)).toEqual([
      expect.stringMatching(/unknown field "is_negative_hits"/),
    ]);
  });

  it('envoy/envoy-resp-tokens.yaml (tokens from a response header, Envoy 1.40+) is valid against the 1.40 API, and only there', () => {
    const text = readFileSync('envoy/envoy-resp-tokens.yaml', 'utf8');
    const report = checkEnvoyYaml(text, new EnvoyApi({ envoy140: true }));
    expect(report.problems).toEqual([]);
    for (const field of [
      'envoy.config.route.v3.RateLimit.HitsAddend.format',
      'envoy.config.route.v3.RateLimit.apply_on_stream_done',
      'envoy.extensions.filters.http.ratelimit.v3.RateLimit.enable_retry_after_header',
    ]) {
      expect(report.fieldsSeen, field).toContain(field);
    }
    expect(text).toContain('format: "%RESP(x-llm-total-tokens)%"');
    // The API of 1.39 refuses it, on the field only 1.40 has.
    expect(checkEnvoyYaml(text, new EnvoyApi({ envoy139: true })).problems.map((p) => p.message)).toEqual([
      expect.stringMatching(/unknown field "enable_retry_after_header"/),
    ]);
  });

  it('envoy/envoy-jwt-user.yaml (the user from a verified JWT claim, Envoy 1.40+) is valid against the 1.40 API, and only there', () => {
    const text = readFileSync('envoy/envoy-jwt-user.yaml', 'utf8');
    const report = checkEnvoyYaml(text, new EnvoyApi({ envoy140: true }));
    expect(report.problems).toEqual([]);
    for (const field of [
      'envoy.extensions.rate_limit_descriptors.jwt_claim.v3.Descriptor (@type)',
      'envoy.extensions.rate_limit_descriptors.jwt_claim.v3.Descriptor.claim_name',
      'envoy.config.route.v3.RateLimit.Action.extension',
      'envoy.extensions.filters.http.jwt_authn.v3.JwtProvider.forward',
      'envoy.extensions.filters.http.ratelimit.v3.RateLimit.enable_retry_after_header',
    ]) {
      expect(report.fieldsSeen, field).toContain(field);
    }
    // Before 1.40: no such extension, nor the filter's field.
    const before = checkEnvoyYaml(text, new EnvoyApi({ envoy139: true })).problems.map((p) => p.message);
    expect(before).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/jwt_claim\.v3\.Descriptor: no such message/),
        expect.stringMatching(/unknown field "enable_retry_after_header"/),
      ]),
    );
    expect(before).toHaveLength(2);
  });

  it('envoy/envoy-quota-routing.yaml (backends still under quota, in a namespace of its own, Envoy 1.39+) is valid against 1.39, and only there', () => {
    const text = readFileSync('envoy/envoy-quota-routing.yaml', 'utf8');
    const report = checkEnvoyYaml(text, new EnvoyApi({ envoy139: true }));
    expect(report.problems).toEqual([]);
    for (const field of [
      'envoy.extensions.filters.http.ratelimit.v3.RateLimit.metadata_namespace',
      'envoy.config.route.v3.RateLimit.Action.GenericKey.descriptor_key',
      'envoy.extensions.access_loggers.file.v3.FileAccessLog.log_format',
    ]) {
      expect(report.fieldsSeen, field).toContain(field);
    }
    expect(text).toContain('%DYNAMIC_METADATA(io.tollgate.quota:passedBackends)%');
    expect(text).toContain('metadata_namespace: io.tollgate.quota');
    // 1.38's API refuses it, on the one field 1.39 added.
    expect(checkEnvoyYaml(text, new EnvoyApi({ envoy138: true })).problems.map((p) => p.message)).toEqual([
      expect.stringMatching(/unknown field "metadata_namespace"/),
    ]);
  });

  it('the file before issue 13 was valid too: its bypasses were semantic, not typos', () => {
    expect(checkEnvoyYaml(readFileSync(`${FIXTURES}/before-issue-13.yaml`, 'utf8'), api).problems).toEqual([]);
  });
});

describe('the checker rejects each kind of mistake, with its line', () => {
  const markedLine = (text: string): number => text.split('\n').findIndex((l) => /# <- rejected here$/.test(l)) + 1;

  it("accepts the fixtures' common base", () => {
    expect(checkEnvoyYaml(readFileSync(`${FIXTURES}/valid-minimal.yaml`, 'utf8'), api).problems).toEqual([]);
  });

  it.each([
    ['misspelled-field', /unknown field "use_remote_adress".*did you mean use_remote_address/],
    ['bad-enum-value', /"STATC" is not a value of enum envoy\.config\.cluster\.v3\.Cluster\.DiscoveryType/],
    ['wrong-type-url', /rate_limit\.v2\.RateLimit is not a v3 API message/],
    ['numeric-duration', /a Duration is a string of seconds.*got number 0\.05/],
    ['deprecated-field', /deprecated field envoy\.config\.cluster\.v3\.Cluster\.http2_protocol_options/],
    ['deprecated-enum-value', /deprecated enum value envoy\.config\.core\.v3\.ApiVersion\.V2/],
    ['undefined-cluster', /cluster "ap" is not defined/],
    ['oneof-set-twice', /oneof path_specifier: path and prefix are both set/],
    ['wrapper-as-mapping', /google\.protobuf\.BoolValue is written as a plain bool value/],
    ['unquoted-off', /false.* is not a value of enum .*XRateLimitHeadersRFCVersion/],
    ['rlqs-bucket-id-not-nested', /unknown field "category" in .*RateLimitQuotaBucketSettings\.BucketIdBuilder\b/],
    ['rlqs-regex-without-engine', /oneof engine_type of xds\.type\.matcher\.v3\.RegexMatcher is required: set one of google_re2/],
  ])('%s.yaml', (name, message) => {
    const text = readFileSync(`${FIXTURES}/${name}.yaml`, 'utf8');
    const { problems } = checkEnvoyYaml(text, api);
    expect(problems).toHaveLength(1);
    expect(problems[0]!.message).toMatch(message);
    expect(problems[0]!.line).toBe(markedLine(text));
  });

  it('a required field left out is rejected too (a protoc-gen-validate rule, which Envoy enforces on load)', () => {
    const text = readFileSync('envoy/envoy-rlqs.yaml', 'utf8').replace(/\n *reporting_interval: 5s/, '');
    const { problems } = checkEnvoyYaml(text, api);
    expect(problems.map((p) => p.message)).toEqual([expect.stringMatching(/required field .*\.RateLimitQuotaBucketSettings\.reporting_interval is not set/)]);
  });

  it('a wrong @type that names no message is rejected too', () => {
    const text = readFileSync(`${FIXTURES}/valid-minimal.yaml`, 'utf8').replace('router.v3.Router', 'router.v3.Routers');
    const { problems } = checkEnvoyYaml(text, api);
    expect(problems.map((p) => p.message)).toEqual([expect.stringMatching(/Routers: no such message/)]);
  });
});
