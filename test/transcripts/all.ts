/** Every transcript scenario, one import per facility; `npm run record-transcripts` records them. */
import type { Scenario } from './scenario';

export const scenarios: Scenario[] = [];
