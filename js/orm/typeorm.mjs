// idemflow/typeorm for ES modules: the same objects as typeorm.cjs.
import typeorm from './typeorm.cjs';

export const { withTypeorm, typeormManager } = typeorm;

export default typeorm;
