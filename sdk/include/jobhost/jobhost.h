// jobhost/jobhost.h — the one header a job author includes. Start with job.h (the Job
// class and JOBHOST_JOB), then stream.h (the dataflow API) and state.h (keyed state).
#pragma once

#include "jobhost/version.h"  // first: stops a pre-C++20 build with one clear line

#include "jobhost/config.h"
#include "jobhost/errors.h"
#include "jobhost/format.h"
#include "jobhost/functions.h"
#include "jobhost/job.h"
#include "jobhost/operator.h"
#include "jobhost/serializer.h"
#include "jobhost/sinks.h"
#include "jobhost/sources.h"
#include "jobhost/state.h"
#include "jobhost/stream.h"
#include "jobhost/time.h"
#include "jobhost/windows.h"
