/** Freezes `v` and every object and array inside it (iteratively: nesting is bounded upstream, the stack is not). Returns `v`. */
export function deepFreeze<T>(v: T): T {
  const stack: unknown[] = [v];
  while (stack.length > 0) {
    const x = stack.pop();
    if (typeof x !== "object" || x === null || Object.isFrozen(x)) continue;
    Object.freeze(x);
    for (const k of Object.keys(x)) stack.push((x as Record<string, unknown>)[k]);
  }
  return v;
}
