/** Media identity at the edge: SSRF-safe fetch, image headers, identity records, decode-service client. */
export * from "./errors.ts";
export * from "./ip-address.ts";
export * from "./ssrf.ts";
export * from "./data-url.ts";
export * from "./safe-fetch.ts";
export * from "./image-header.ts";
export * from "./image-identity.ts";
export * from "./identity-record.ts";
export * from "./torchcodec-metadata.ts";
export * from "./probe-result.ts";
export * from "./decode-client.ts";
export * from "./signed-url.ts";
export * from "./store-result.ts";
