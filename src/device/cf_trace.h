/* cf_trace.h — the layout and slot names of the CF_TRACE buffer, shared by the
 * kernel that writes it (cf_sm90.cuh, cf_reduce.cuh, the generated epilogue)
 * and the host that reads it (cli_gpu.c).  Valid C and CUDA: enums only, so it
 * changes no generated code.
 *
 * cf_trace[CTA][role][tile][event] holds clock64 stamps of thread 0 of each
 * role (the consumer warpgroups 0 and 1; 2: the finisher).  Tiles past
 * CF_TRACE_TILES - 1 are not kept; slot CF_TRACE_TILES holds the role's
 * summary (CF_TRS_*). */
#ifndef CF_TRACE_H
#define CF_TRACE_H

enum {
    CF_TRACE_CTAS = 160,
    CF_TRACE_ROLES = 3,
    CF_TRACE_TILES = 31,
    CF_TRACE_EV = 22
};

/* The events of one tile. */
enum cf_trace_event {
    CF_TRE_ORDER = 0,       /* at the order barrier                                         */
    CF_TRE_TURN = 1,        /* just after it; ptxas emits BAR.SYNC.DEFER_BLOCKING, so this is
                             * read before the barrier completes: read ORDER -> ACC as order
                             * wait + mainloop                                               */
    CF_TRE_ACC = 2,         /* the accumulator complete                                     */
    CF_TRE_EPI_DONE = 3,    /* the epilogue done                                            */
    CF_TRE_WAIT_DATA = 4,   /* CF_TRACE=2, cycles: the k-loop waiting for operands (full
                             * barriers)                                                     */
    CF_TRE_WAIT_MMA = 5,    /* ... waiting for wgmma groups (wait<1>)                       */
    CF_TRE_ISSUE = 6,       /* ... issuing wgmma                                            */
    CF_TRE_RELEASE = 7,     /* ... releasing stages                                         */
    CF_TRE_DRAIN = 8,       /* ... the last k-block's drain                                 */
    CF_TRE_KLOOP = 9,       /* the k-loop starts, once the tile's turn has come             */
    CF_TRE_KLOOP_END = 10,  /* the k-loop ends                                              */
    CF_TRE_FIN_WAIT = 11,   /* the finisher starts waiting for the tile's park              */
    CF_TRE_FIN_WORK = 12,   /* the park has come: the finisher's work starts                */
    CF_TRE_FIN_DONE = 13,   /* the finisher's work on the tile ends                         */
    CF_TRE_MID_WAIT = 14,   /* (CF_MID) the consumer starts waiting for the finisher before
                             * its late finish                                               */
    CF_TRE_MID_DONE = 15    /* ... and stops                                                */
};

/* Parts of the epilogue: cycles (SPINS: a count) summed over a role's tiles. */
enum cf_trace_cat {
    CF_TRC_GATHER = 0,      /* row partials: loads, spin, fold                              */
    CF_TRC_PARK = 1,        /* a park waiting for the staging buffer                        */
    CF_TRC_STORE = 2,       /* a store's waits: staging buffer free, the warpgroup's barriers */
    CF_TRC_FINISH = 3,      /* a late finish, whole                                         */
    CF_TRC_LOADS = 4,       /* the gather's first round of loads until every epoch matched  */
    CF_TRC_SPINS = 5,       /* the gather's re-polls of a rank that had not posted (a count) */
    CF_TRC_SEC0 = 6,        /* CF_TRC_SECTIONS sections of the epilogue's first part, as Psi
                             * marks them (CF_TRC_STEP in the generated source)              */
    CF_TRC_SECTIONS = 8,
    CF_TRC_FLOOP = 14,      /* a late finish's vector loads and loop over the parked tile   */
    CF_TRC_N = 15
};

/* The summary slot of a role (tile CF_TRACE_TILES). */
enum cf_trace_summary {
    CF_TRS_START = 0,       /* the role starts                                              */
    CF_TRS_END = 1,         /* the role ends                                                */
    CF_TRS_TILES = 2,       /* its tile count                                               */
    CF_TRS_CAT0 = 3,        /* CF_TRS_CAT0 + CF_TRC_*: its epilogue parts                    */
    CF_TRS_LAST_FINISH = 19,/* the end of its last tile's late finish                       */
    CF_TRS_GT_START = 20,   /* %globaltimer (ns, one clock for all SMs): the CTA starts (role 0) */
    CF_TRS_GT_END = 21      /* ... the role ends (K-slice posters included)                 */
};

/* (valid in C and C++ alike: a negative array size fails to compile) */
typedef char cf_trace_layout_fits[((int)CF_TRC_SEC0 + (int)CF_TRC_SECTIONS <= (int)CF_TRC_FLOOP &&
                                   (int)CF_TRS_CAT0 + (int)CF_TRC_N <= (int)CF_TRS_LAST_FINISH &&
                                   (int)CF_TRS_GT_END < (int)CF_TRACE_EV &&
                                   (int)CF_TRE_MID_DONE < (int)CF_TRACE_EV) ? 1 : -1];

#endif
