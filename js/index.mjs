// idemflow for ES modules: the same objects as the CommonJS entry point. Node
// finds its names in index.cjs's `module.exports = { ... }`; InMemoryStore,
// a getter there (loaded at first use), is named here.
import idemflow from './index.cjs';

export * from './index.cjs';
export const { InMemoryStore } = idemflow;
export default idemflow;
