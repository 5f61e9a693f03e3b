// The JSON-over-HTTP pieces both servers share (server.ts: completions; embedding-server.ts: embeddings):
// a request body read within a byte limit and parsed, routing with OpenAI-shaped 404 / 405 errors, and any
// thrown error turned into the ApiError a client gets.

import { createHash, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ApiError } from './validation.js';

/** An HTTP server for `handle`, with the timeouts both servers use. */
export function createApiServer(handle: (req: IncomingMessage, res: ServerResponse) => void): Server {
  const http = createServer(handle);
  // Idle keep-alive sockets are closed by the client first (undici: 4 s) rather than raced by the server
  // closing one just as a client reuses it; headersTimeout must exceed keepAliveTimeout.
  http.keepAliveTimeout = 65_000;
  http.headersTimeout = 66_000;
  // A body that never finishes arriving holds only its socket, for at most this long (Node's default: 5 min).
  http.requestTimeout = 120_000;
  return http;
}

/** Starts `http` listening; resolves with the bound address, rejects if the port cannot be had. */
export async function listenOn(http: Server, port: number, host: string): Promise<AddressInfo> {
  await new Promise<void>((resolve, reject) => {
    http.once('error', reject);
    http.listen(port, host, () => { http.off('error', reject); resolve(); });
  });
  return http.address() as AddressInfo;
}

/** Each route of a server and the method it takes. */
export type Routes = ReadonlyMap<string, 'GET' | 'POST'>;

/** The request's path without its query. */
export function pathOf(req: IncomingMessage): string {
  return (req.url ?? '/').split('?')[0]!;
}

/** OpenAI's retrieve-a-model route, /v1/models/ID: one route whatever the ID (modelIdOf gives it). */
export const MODEL_ROUTE = '/v1/models/{id}';

/** The route a request's path belongs to: the path itself, or MODEL_ROUTE. */
function routeOf(req: IncomingMessage): string {
  const path = pathOf(req);
  return path.startsWith('/v1/models/') ? MODEL_ROUTE : path;
}

/** The model ID of a MODEL_ROUTE request. */
export function modelIdOf(req: IncomingMessage): string {
  const id = pathOf(req).slice('/v1/models/'.length);
  try { return decodeURIComponent(id); } catch { return id; }
}

/** The answer of /v1/models (a list of this card) or /v1/models/ID (the card: 404 for another ID); undefined on other routes. */
export function modelsAnswer(req: IncomingMessage, route: string, card: { readonly id: string; readonly [field: string]: unknown }): unknown {
  if (route === '/v1/models') return { object: 'list', data: [card] };
  if (route !== MODEL_ROUTE) return undefined;
  const id = modelIdOf(req);
  if (id !== card.id) throw new ApiError(404, `the model '${id}' does not exist; this server has '${card.id}'`, 'invalid_request_error', 'model', 'model_not_found');
  return card;
}

/** The request's route, or 'other': a metrics label must come from a fixed set, not from what clients send. */
export function routeLabel(req: IncomingMessage, routes: Routes): string {
  const route = routeOf(req);
  return routes.has(route) ? route : 'other';
}

/**
 * Who may call a server: an API key every route asks for (`Authorization: Bearer KEY`, as vLLM's --api-key) but
 * /health and /metrics (open for probes and scrapers), and the browser origins given CORS headers ('*': any).
 */
export interface AccessOptions {
  readonly apiKey?: string;
  readonly allowedOrigins?: readonly string[];
}

/**
 * The route of a request, after 404 for an unknown path and 405 (with an Allow header) for a wrong method; HEAD is
 * GET without the body. With `access`: CORS headers for an allowed origin, a browser's preflight (OPTIONS) answered
 * here (undefined: nothing more to do), and 401 for a guarded route without the API key.
 */
/** The routes an API key does not guard. */
const OPEN_ROUTES = ['/health', '/metrics'];

export function checkRoute(req: IncomingMessage, res: ServerResponse, routes: Routes, access: AccessOptions = {}): string | undefined {
  const path = routeOf(req);
  const allowed = routes.get(path);
  const origin = req.headers.origin;
  if (origin !== undefined && access.allowedOrigins !== undefined && (access.allowedOrigins.includes('*') || access.allowedOrigins.includes(origin))) {
    res.setHeader('access-control-allow-origin', access.allowedOrigins.includes('*') ? '*' : origin);
    res.setHeader('vary', 'Origin');
    if (req.method === 'OPTIONS' && allowed !== undefined && req.headers['access-control-request-method'] !== undefined) {
      res.writeHead(204, {
        'access-control-allow-methods': allowed === 'GET' ? 'GET, HEAD, OPTIONS' : `${allowed}, OPTIONS`,
        'access-control-allow-headers': 'authorization, content-type', 'access-control-max-age': '600',
      });
      res.end();
      return undefined;
    }
  }
  if (allowed === undefined) throw new ApiError(404, `no route for ${req.method} ${pathOf(req)}`, 'invalid_request_error', null, 'not_found');
  const method = req.method === 'HEAD' && allowed === 'GET' ? 'GET' : req.method;
  if (method !== allowed) {
    res.setHeader('allow', allowed === 'GET' ? 'GET, HEAD' : allowed);
    throw new ApiError(405, `${path} takes ${allowed}, got ${req.method}`, 'invalid_request_error', null, 'method_not_allowed');
  }
  if (access.apiKey !== undefined && !OPEN_ROUTES.includes(path) && !keyMatches(req.headers.authorization, access.apiKey)) {
    throw new ApiError(401, req.headers.authorization === undefined
      ? 'this server asks for an API key: send it as "Authorization: Bearer KEY"'
      : 'the API key given is not this server\'s', 'invalid_request_error', null, 'invalid_api_key');
  }
  return path;
}

/** Whether an Authorization header carries the key (compared in constant time, through equal-length digests). */
function keyMatches(header: string | undefined, key: string): boolean {
  const given = /^Bearer (.+)$/.exec(header ?? '')?.[1];
  if (given === undefined) return false;
  const digest = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(digest(given), digest(key));
}

/** The body parsed as JSON: 413 past `maxBytes` (declared or received), 400 when it is not JSON. */
export function readJsonBody(req: IncomingMessage, maxBytes: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const declared = Number(req.headers['content-length'] ?? 0);
    if (declared > maxBytes) { reject(new ApiError(413, `the request body has ${declared} bytes; the limit is ${maxBytes}`)); req.resume(); return; }
    const chunks: Buffer[] = [];
    let size = 0, failed = false;
    req.on('data', (c: Buffer) => {
      if (failed) return;
      size += c.length;
      if (size > maxBytes) { failed = true; reject(new ApiError(413, `the request body exceeds the limit of ${maxBytes} bytes`)); return; }
      chunks.push(c);
    });
    req.on('error', (e) => { if (!failed) { failed = true; reject(new ApiError(400, `reading the request body failed: ${e.message}`)); } });
    req.on('end', () => {
      if (failed) return;
      const text = Buffer.concat(chunks).toString('utf8');
      try {
        resolve(JSON.parse(text));
      } catch (e) {
        reject(new ApiError(400, `the request body is not valid JSON: ${(e as Error).message}`));
      }
    });
  });
}

/**
 * Counts the request under its route and status in `requests`, then writes `status` as JSON — an ApiError's
 * OpenAI-shaped body, or `body` — unless the response went out already or the client is gone.
 */
export function sendJson(res: ServerResponse, req: IncomingMessage, routes: Routes, requests: { inc(labels: Record<string, string>): void }, status: number | ApiError, body?: unknown): void {
  const error = status instanceof ApiError ? status : undefined;
  const code = error ? error.status : status as number;
  requests.inc({ endpoint: routeLabel(req, routes), status: String(code) });
  if (res.headersSent || res.destroyed) return;
  res.writeHead(code, { 'content-type': 'application/json' });
  res.end(JSON.stringify(error ? error.body() : body));
}

/** What a client is told of an error: ApiErrors as they are, bad arguments as 400, anything else as 500. */
export function toApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  const name = (error as Error)?.name;
  if (name === 'ArgumentError' || name === 'TokenizerError' || name === 'EmbedInputError') return new ApiError(400, (error as Error).message);
  return new ApiError(500, `internal error: ${(error as Error)?.message ?? String(error)}`, 'server_error');
}
