/** The CI-sized swarm, second half (swarm-half.ts says what it runs). */
import { swarmHalf } from './swarm-half.js';

swarmHalf(1);
