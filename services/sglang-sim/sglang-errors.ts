/**
 * SGLang's own error shapes (http_server.py, serving_base.py), which the simulator must reproduce on
 * the wire. These are not kvedge errors (src/api/errors.ts): they model what a real worker answers.
 */

/** A Python ValueError in the /generate path: 400 `{"error":{"message"}}`, or inline in a stream. */
export class SglangValueError extends Error {
  override readonly name = "SglangValueError";
}

/**
 * A pydantic RequestValidationError on the request body:
 * 400 `{"object":"error","message","type":"Bad Request","param":null,"code":400}`.
 */
export class SglangValidationError extends Error {
  override readonly name = "SglangValidationError";
}

/** An uncaught exception (e.g. Python TypeError): Starlette's bare 500 "Internal Server Error". */
export class SglangInternalError extends Error {
  override readonly name = "SglangInternalError";
}

/** The OpenAI-side `ErrorResponse` of SGLang's /v1 routes. */
export class SglangOpenAIError extends Error {
  override readonly name = "SglangOpenAIError";
  readonly status: number;
  readonly errType: string;
  constructor(message: string, status = 400, errType = "BadRequest") {
    super(message);
    this.status = status;
    this.errType = errType;
  }
}

export function validationErrorBody(message: string): Record<string, unknown> {
  return { object: "error", message, type: "Bad Request", param: null, code: 400 };
}

export function openAIErrorBody(message: string, errType: string, status: number): Record<string, unknown> {
  return { object: "error", message, type: errType, param: null, code: status };
}

/** The inline error frame of a /generate stream (http_server.py stream_results). */
export function streamErrorFrame(message: string): Record<string, unknown> {
  return { error: { message, type: "invalid_request_error", code: 400, retryable: false } };
}
