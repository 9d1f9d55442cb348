// Compiled with tsc --strict (never run): the public types as a CommonJS consumer sees them.
import idemflow = require('idemflow');

const error: idemflow.IdemflowError = new idemflow.IdemflowError('UNKNOWN_WORKFLOW', 'not yet');
const code: idemflow.ErrorCode = error.code;
const rows: idemflow.TableRow[] = idemflow.RuleSet.builtin('deposit-swap').table();
const report: idemflow.VerificationReport = idemflow.verifyRuleSet(idemflow.RuleSet.builtin('order-shipment'));
void [code, rows, report];
