// Module resolution hook of workers/instrumented-idemflow.mjs: every import of
// 'idemflow' but the wrapper's own gets the wrapper.
const WRAPPER = new URL('./instrumented-idemflow.mjs', import.meta.url).href;

export async function resolve(specifier, context, next) {
  if (specifier === 'idemflow' && context.parentURL !== WRAPPER) return { url: WRAPPER, shortCircuit: true };
  return next(specifier, context);
}
