/**
 * The grpc-js certificate-provider listener types, from its `experimental` namespace (the
 * names are not exported at the top level).
 */
import type { experimental } from '@grpc/grpc-js';

export type CaCertificateUpdateListener = experimental.CaCertificateUpdateListener;
export type IdentityCertificateUpdateListener = experimental.IdentityCertificateUpdateListener;
export type CertificateProvider = experimental.CertificateProvider;
