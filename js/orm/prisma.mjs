// idemflow/prisma for ES modules: the same objects as prisma.cjs.
import prisma from './prisma.cjs';

export const { withPrisma, prismaTransaction } = prisma;

export default prisma;
