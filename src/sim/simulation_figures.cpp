// A run's figures: what the event loop accumulated (series, waits, losses, per budget), summed
// into the RunResult at the end, with the run's own consistency checks.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/owed.h"
#include "sim/simulation_run.h"

namespace allot::sim::run_detail {

void Run::finish(Time end) {
  for (BucketSeries* s :
       {&available_, &allocated_, &unallocated_, &occupied_, &assigned_all_, &fragmented_}) {
    s->flush(end);
  }
  for (auto* v : {&demand_, &delivered_, &delivered_allocated_}) {
    for (BucketSeries& s : *v) s.flush(end);
  }
  r_.start = origin_;
  r_.end = end;
  r_.bucket = o_.bucket;
  r_.jobs = 0;
  for (const LogicalJob& j : jobs_) r_.jobs += j.arrived && j.service < 0;
  // Jobs still in the system.
  Milli core_running = 0;
  std::size_t core_pending = 0;
  for (const auto& [id, e] : sched_.jobs()) {
    if (e.state == core::JobState::Pending) ++core_pending;
    if (e.state != core::JobState::Pending) {
      for (const core::GpuSlot& g : e.run.placement) core_running += g.milli;
    }
  }
  std::size_t replicas_pending = 0;
  for (std::size_t i = 0; i < jobs_.size(); ++i) {
    LogicalJob& j = jobs_[i];
    if (j.ended || !j.arrived) continue;
    const RunSlot& s = slot(j.run_id);
    if (j.service >= 0) {  // a service's replica: the inference tier's figures
      if (s.running) {
        const double ms = static_cast<double>(j.milli) * static_cast<double>(end - s.started);
        assigned_ms_ += ms;
        used_ms_ += ms * job(i).job.utilization;
      } else {
        ++replicas_pending;
      }
      if (j.first_start < 0) {
        waits_[j.category].push_back(static_cast<double>(end - job(i).job.submit));
        ++censored_[j.category];
      }
      continue;
    }
    if (s.running) {
      ++r_.running_at_end;
      const double ms = static_cast<double>(j.milli) * static_cast<double>(end - s.started);
      assigned_ms_ += ms;
      used_ms_ += ms * job(i).job.utilization;
    } else {
      ++r_.pending_at_end;
    }
    if (j.first_start < 0) {
      waits_[j.category].push_back(static_cast<double>(end - job(i).job.submit));
      ++censored_[j.category];
      if (*job(i).job.kind == core::JobKind::Interactive) {
        interactive_waits_.push_back(static_cast<double>(end - job(i).job.submit));
        ++interactive_censored_;
      }
      budget_waits_[j.leaf].push_back(static_cast<double>(end - job(i).job.submit));
      ++budget_censored_[j.leaf];
    }
  }

  const double span = static_cast<double>(end - origin_);
  const double total = static_cast<double>(capacity_) * span;
  const double avail = static_cast<double>(available_.total());
  const double occ = static_cast<double>(occupied_.total());
  r_.total_gpu_hours = total / kMilliGpuSecondsPerGpuHour;
  r_.available_gpu_hours = avail / kMilliGpuSecondsPerGpuHour;
  r_.occupied_gpu_hours = occ / kMilliGpuSecondsPerGpuHour;
  r_.allocated_gpu_hours = static_cast<double>(allocated_.total()) / kMilliGpuSecondsPerGpuHour;
  r_.unallocated_gpu_hours = static_cast<double>(unallocated_.total()) / kMilliGpuSecondsPerGpuHour;
  r_.draining_gpu_hours =
      static_cast<double>(assigned_all_.total() - occupied_.total()) / kMilliGpuSecondsPerGpuHour;
  r_.availability = total > 0 ? avail / total : 0;
  r_.occupancy = avail > 0 ? occ / avail : 0;
  r_.occupancy_allocated = avail > 0 ? static_cast<double>(allocated_.total()) / avail : 0;
  r_.occupancy_unallocated = avail > 0 ? static_cast<double>(unallocated_.total()) / avail : 0;
  r_.utilization = assigned_ms_ > 0 ? used_ms_ / assigned_ms_ : 1.0;
  r_.utilization_known = utilization_known_;
  r_.lost_gpu_hours = lost_ms_ / kMilliGpuSecondsPerGpuHour;
  r_.interactive_lost_gpu_hours = interactive_lost_ms_ / kMilliGpuSecondsPerGpuHour;
  r_.interactive_wait = summarize(interactive_waits_, interactive_censored_);
  r_.fragmented_gpu_hours = static_cast<double>(fragmented_.total()) / kMilliGpuSecondsPerGpuHour;
  r_.fragmentation = avail > 0 ? static_cast<double>(fragmented_.total()) / avail : 0;
  r_.makespan = r_.completed > 0 ? static_cast<double>(last_completion_ - origin_) : 0;
  r_.completion = summarize(completion_, 0);

  std::vector<double> all;  // the training tier's: replicas are the inference tier's
  std::size_t all_censored = 0;
  for (int c = 0; c < kCategories; ++c) {
    if (c == kInference) continue;
    all.insert(all.end(), waits_[c].begin(), waits_[c].end());
    all_censored += censored_[c];
  }
  r_.waits.emplace_back("all", summarize(all, all_censored));
  r_.wait_samples.emplace_back("all", all);
  for (int c = 0; c < kCategories; ++c) {
    // A workload without MIG jobs, a run without services.
    if ((c == kMig || c == kInference) && waits_[c].empty()) continue;
    r_.waits.emplace_back(kCategoryNames[c], summarize(waits_[c], censored_[c]));
    r_.wait_samples.emplace_back(kCategoryNames[c], waits_[c]);
  }

  // Hourly series.
  const std::size_t buckets = static_cast<std::size_t>((end - origin_ + o_.bucket - 1) / o_.bucket);
  for (std::size_t b = 0; b < buckets; ++b) {
    const Time from = origin_ + static_cast<Time>(b) * o_.bucket;
    const Time to = std::min(end, from + o_.bucket);
    r_.series_total.push_back(capacity_ * (to - from));
    r_.series_available.push_back(available_.at(b));
    r_.series_allocated.push_back(allocated_.at(b));
    r_.series_unallocated.push_back(unallocated_.at(b));
  }

  // Impact per budget: owed = allocated fraction of available capacity, capped hour by hour at
  // the budget's demand; delivered counts toward it up to the owed amount of each hour.
  const core::BudgetTree& tree = sched_.budgets();
  for (core::BudgetId b = 0; b < tree.size(); ++b) {
    if (!tree.valid(b) || !tree.is_leaf(b) || b == tree.root()) continue;
    BudgetResult br;
    br.path = tree.node(b).path;
    br.fraction = tree.allocated_fraction(b, cluster_);
    br.jobs = budget_jobs_[b];
    core::OwedTally owed;  // the one definition of owed (core/owed.h)
    for (std::size_t h = 0; h < buckets; ++h) {
      owed.add(br.fraction * static_cast<double>(available_.at(h)),
               static_cast<double>(demand_[b].at(h)), static_cast<double>(delivered_[b].at(h)));
      br.series_held.push_back(delivered_[b].at(h));
      br.series_allocated.push_back(delivered_allocated_[b].at(h));
      br.series_demand.push_back(demand_[b].at(h));
    }
    br.demand_gpu_hours = static_cast<double>(demand_[b].total()) / kMilliGpuSecondsPerGpuHour;
    br.owed_gpu_hours = owed.owed / kMilliGpuSecondsPerGpuHour;
    br.delivered_gpu_hours =
        static_cast<double>(delivered_[b].total()) / kMilliGpuSecondsPerGpuHour;
    br.allocated_gpu_hours =
        static_cast<double>(delivered_allocated_[b].total()) / kMilliGpuSecondsPerGpuHour;
    br.delivered_toward_owed_gpu_hours = owed.counted / kMilliGpuSecondsPerGpuHour;
    br.impact = owed.impact();
    br.waits = summarize(budget_waits_[b], budget_censored_[b]);
    br.preemptions = budget_preemptions_[b];
    br.lost_gpu_hours = budget_lost_ms_[b] / kMilliGpuSecondsPerGpuHour;
    r_.budgets.push_back(std::move(br));
  }
  // The four metrics' impact figures. The mean and Jain's index count every budget owed anything;
  // the worst and the count at 95% leave out budgets owed almost nothing.
  double owed_sum = 0;
  for (const BudgetResult& br : r_.budgets) {
    if (br.owed_gpu_hours > 0) {
      ++r_.budgets_owed;
      owed_sum += br.owed_gpu_hours;
    }
  }
  const double n = static_cast<double>(r_.budgets_owed);
  r_.owed_little_gpu_hours = n > 0 ? kOwedLittleFraction * owed_sum / n : 0;
  double impact_sum = 0, impact_sq = 0;
  r_.impact_min = 1;
  for (BudgetResult& br : r_.budgets) {
    if (br.owed_gpu_hours <= 0) continue;
    impact_sum += br.impact;
    impact_sq += br.impact * br.impact;
    br.owed_little = br.owed_gpu_hours < r_.owed_little_gpu_hours;
    if (br.owed_little) {
      ++r_.budgets_owed_little;
      continue;
    }
    r_.impact_min = std::min(r_.impact_min, br.impact);
    r_.budgets_at_95 += br.impact >= 0.95;
  }
  r_.impact_mean = n > 0 ? impact_sum / n : 1.0;
  r_.jain_fairness = impact_sq > 0 ? impact_sum * impact_sum / (n * impact_sq) : 1.0;
  finish_services(end);

  // Conservation checks.
  std::size_t multi_end = 0;
  for (const LogicalJob& j : jobs_) multi_end += j.end_count > 1;
  r_.checks.push_back({"each job ends at most once", multi_end == 0,
                       std::to_string(multi_end) + " jobs ended more than once"});
  const std::size_t accounted =
      r_.completed + r_.pending_at_end + r_.running_at_end + r_.submit_errors;
  r_.checks.push_back({"every job completed, or is pending or running at the end",
                       accounted == r_.jobs,
                       std::to_string(accounted) + " of " + std::to_string(r_.jobs)});
  r_.checks.push_back(
      {"the core agrees on pending and running jobs",
       core_pending == r_.pending_at_end + replicas_pending && core_running == assigned_all_.rate(),
       "core: " + std::to_string(core_pending) + " pending, " + std::to_string(core_running) +
           " milli-GPUs running; simulator: " +
           std::to_string(r_.pending_at_end + replicas_pending) + ", " +
           std::to_string(assigned_all_.rate())});
  std::size_t over = 0;
  for (std::size_t b = 0; b < buckets; ++b) {
    over += occupied_.at(b) > available_.at(b) || available_.at(b) > r_.series_total[b];
  }
  r_.checks.push_back({"occupied <= available <= total, hour by hour", over == 0 && overfull_ == 0,
                       std::to_string(over) + " hours over, " + std::to_string(overfull_) +
                           " over-full node placements"});
  r_.checks.push_back({"allocated + unallocated = occupied",
                       allocated_.total() + unallocated_.total() == occupied_.total(),
                       std::to_string(allocated_.total() + unallocated_.total()) + " vs " +
                           std::to_string(occupied_.total()) + " milli-GPU-seconds"});
  core::MilliGpuSeconds delivered_sum = 0;
  for (const BucketSeries& s : delivered_) delivered_sum += s.total();
  r_.checks.push_back({"budgets' delivered GPU-time sums to assigned GPU-time",
                       delivered_sum == assigned_all_.total(),
                       std::to_string(delivered_sum) + " vs " +
                           std::to_string(assigned_all_.total()) + " milli-GPU-seconds"});
}

}  // namespace allot::sim::run_detail
