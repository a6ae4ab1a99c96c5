/**
 * The error envelope of DESIGN §3: every failure is JSON
 * `{"success": false, "error": "<sentence>", "code": "<UPPER_SNAKE>"[, "details": [...]]}`,
 * never HTML, never a stack.
 */
import { DomainError, ValidationError, type ErrorCategory, type ValidationDetail } from '../peers';

export interface ErrorBody {
  success: false;
  error: string;
  code: string;
  details?: ValidationDetail[];
}

/** A failure the HTTP layer itself detects (auth, media type, routing). */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Readonly<Record<string, string>> = {},
    /**
     * Whether the answer is the daemon's fault, logged at error with the stack (default: a 5xx
     * status). A limit a client reached (503 EVENT_STREAMS_FULL) is not: it is counted, and its
     * request line says it, but any read-token holder could otherwise fill the log with errors.
     */
    readonly serverFault: boolean = status >= 500,
  ) {
    super(message);
    this.name = 'HttpError';
  }
}

const STATUS_OF: Readonly<Record<ErrorCategory, number>> = {
  validation: 400,
  not_found: 404,
  conflict: 409,
  unavailable: 503,
  storage: 507,
  internal: 500,
};

export interface ErrorResponse {
  status: number;
  body: ErrorBody;
  headers: Readonly<Record<string, string>>;
  /** True when the cause is not the client's: worth an error line in the log. */
  serverFault: boolean;
}

/** The 415 of a body in another charset or content encoding than the parser takes. */
export const BODY_ENCODING_REFUSED =
  'The request body must be JSON in UTF-8 without content encoding';

/** Errors of express' body parser and router carry `type` and/or `status`. */
interface ExpressError {
  type?: unknown;
  status?: unknown;
  statusCode?: unknown;
}

function isExpressError(error: unknown): error is ExpressError & Error {
  return error instanceof Error && ('type' in error || 'status' in error || 'statusCode' in error);
}

function body(code: string, error: string, details?: ValidationDetail[]): ErrorBody {
  return details && details.length > 0
    ? { success: false, error, code, details }
    : { success: false, error, code };
}

const INTERNAL: ErrorResponse = {
  status: 500,
  body: body('INTERNAL_ERROR', "Internal error; the daemon's log has the details"),
  headers: {},
  serverFault: true,
};

export function toErrorResponse(error: unknown): ErrorResponse {
  if (error instanceof DomainError) {
    const status = STATUS_OF[error.category];
    const details = error instanceof ValidationError ? error.details : undefined;
    return {
      status,
      body: body(error.code, error.message, details),
      headers: {},
      serverFault: status >= 500,
    };
  }
  if (error instanceof HttpError) {
    return {
      status: error.status,
      body: body(error.code, error.message),
      headers: error.headers,
      serverFault: error.serverFault,
    };
  }
  if (isExpressError(error)) return fromExpressError(error);
  return INTERNAL;
}

function fromExpressError(error: ExpressError & Error): ErrorResponse {
  const client = (status: number, code: string, message: string): ErrorResponse => ({
    status,
    body: body(code, message),
    headers: {},
    serverFault: false,
  });
  switch (error.type) {
    case 'entity.too.large':
      return client(
        413,
        'BODY_TOO_LARGE',
        'The request body is too large; bodies here are small JSON objects',
      );
    case 'entity.parse.failed':
      return client(
        400,
        'INVALID_JSON',
        'The request body is not valid JSON (an object is expected)',
      );
    case 'encoding.unsupported':
    case 'charset.unsupported':
      return client(415, 'UNSUPPORTED_MEDIA_TYPE', BODY_ENCODING_REFUSED);
    case 'request.aborted':
    case 'request.size.invalid':
      return client(400, 'BAD_REQUEST', 'The request body ended before its announced length');
    default:
      break;
  }
  const status = typeof error.status === 'number' ? error.status : error.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    // The router decodes the key segment of the path: the only decoding that can fail here.
    if (error.message.startsWith('Failed to decode param')) {
      return client(
        400,
        'INVALID_PUBLIC_KEY',
        'The public key in the path has broken percent-encoding',
      );
    }
    return client(status, 'BAD_REQUEST', 'The request is malformed');
  }
  return INTERNAL;
}
